"""MCP server over stdio exposing the agent tools for one workspace.

``kgrader mcp --workspace DIR`` serves ``describe_task``, ``compile_kernel``,
``bench_kernel``, ``profile_kernel``, ``measure_peak``, ``accept_candidate`` and
``search_experience`` (see :mod:`grader.agent.tools`) through the ``mcp`` package (v2:
:class:`mcp.server.mcpserver.MCPServer`), and the task description as the resource
``kgrader://task`` (the same JSON as ``describe_task``). The workspace is fixed when the
server starts, so a client can send only kernel source (and search filters).

* ``tools/list`` is generated from :mod:`grader.agent.schemas`, the definition
  ``kgrader tools schema`` prints: the same descriptions, enums and bounds.
* Arguments are checked against that schema by :func:`grader.agent.schemas.check_args`;
  a bad one is a tool error (``isError: true``) whose structured content has one error
  with code ``bad_argument``, the field and a one-line reason; nothing else runs. An
  unknown tool is a tool error too (stage ``usage``, code ``unknown_tool``); both are the
  caller's (origin ``usage``, never the candidate's or the machine's), and a kgrader error
  raised while a tool runs is typed by :func:`grader.agent.results.fault` (the caller's,
  the candidate's, the set-up's or the machine's), never a raw traceback.
* Each tool's result is the tool's dict, as structured content and as JSON text; a
  candidate's failure is a normal result with ``ok: false``, not an MCP error. A kgrader
  bug is ``internal_error`` (origin ``infrastructure``), its text on stderr only: an
  exception's text could carry what the candidate must not read.
* A client that sends a progress token gets ``notifications/progress`` every
  :data:`PROGRESS_EVERY_S` seconds while a tool runs (progress: seconds elapsed; the
  message names the tool), and a last one when it returns.

stdout carries the protocol only: logs go to stderr.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import anyio

from grader import __version__
from grader.agent import tools as kt
from grader.agent.results import fault
from grader.agent.schemas import check_args, mcp_tools
from grader.errors import KgraderError
from grader.grading.redact import facts_for

__all__ = ["PROGRESS_EVERY_S", "TASK_URI", "build_server", "serve"]

log = logging.getLogger("kgrader.mcp")
TASK_URI = "kgrader://task"
PROGRESS_EVERY_S = 2.0

_INSTRUCTIONS = (
    "kgrader grades GPU kernels for one fixed task in a sandbox. Start with describe_task (or "
    "read the resource kgrader://task): it gives the entry point, tensors, tune shapes, "
    "tolerances, policy and the reference. Send the complete module source. compile_kernel "
    "checks it builds; bench_kernel checks correctness then times it against the reference "
    "(speedup_vs_reference); profile_kernel adds a roofline analysis; measure_peak gives the "
    "device ceilings; accept_candidate makes it the new best when it is measurably faster than "
    "the current best; search_experience returns past attempts with one-line lessons."
)


def _result(payload: dict[str, Any], is_error: bool = False) -> Any:
    from mcp_types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=json.dumps(payload))],
                          structured_content=payload, is_error=is_error)


def build_server(workspace: str | Path) -> Any:
    """An :class:`MCPServer` bound to ``workspace`` (validated now: raises WorkspaceError)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.resources import FunctionResource
    from mcp_types import Tool

    ws = kt.Workspace.open(workspace)

    class _Server(MCPServer):
        """Tools listed and validated from grader.agent.schemas, not from signatures."""

        async def list_tools(self) -> list[Any]:
            return [Tool(name=t["name"], description=t["description"],
                         input_schema=t["inputSchema"]) for t in mcp_tools()]

        async def call_tool(self, name: str, arguments: dict[str, Any],
                            context: Any = None) -> Any:
            try:
                args = check_args(name, arguments)
            except KgraderError as e:  # a bad argument, or an unknown tool: typed, not run
                return _result(fault(name, e), is_error=True)
            return await _run_with_progress(name, args, context)

    async def _run_with_progress(name: str, args: dict[str, Any], context: Any) -> Any:
        t0 = time.monotonic()
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["result"] = kt.call_tool(ws, name, args)
            except KgraderError as e:  # typed: the set-up's, the candidate's or the machine's
                box["result"] = fault(name, e, facts_for(ws.spec))
            except Exception as e:  # a kgrader bug: its text stays on stderr (fail closed)
                log.exception("tool %s failed", name)
                box["result"] = fault(name, e)

        async def progress(message: str) -> None:
            if context is None:
                return
            try:
                await context.report_progress(round(time.monotonic() - t0, 1), None, message)
            except Exception:  # a client gone or without progress support: keep working
                return

        async with anyio.create_task_group() as tg:
            async def beat() -> None:
                while True:
                    await anyio.sleep(PROGRESS_EVERY_S)
                    await progress(f"{name}: running ({time.monotonic() - t0:.0f} s)")

            tg.start_soon(beat)
            # The SDK's own tools run sync functions in a worker thread too: a long
            # evaluation never blocks the protocol loop; the workspace lock serialises them.
            await anyio.to_thread.run_sync(work)
            tg.cancel_scope.cancel()
        await progress(f"{name}: done in {time.monotonic() - t0:.1f} s")
        result: dict[str, Any] = box["result"]
        return _result(result)

    server = _Server(name="kgrader", version=__version__, instructions=_INSTRUCTIONS)

    def task_json() -> str:
        return json.dumps(kt.describe_task(ws))

    server.add_resource(FunctionResource(
        uri=TASK_URI, name="task", mime_type="application/json", fn=task_json,
        description="The task as describe_task returns it (hidden shapes: a count only)."))
    return server


def serve(workspace: str | Path) -> None:
    """Run the server on stdin/stdout until the client closes the connection."""
    build_server(workspace).run("stdio")
