"""MCP server over stdio exposing the agent tools for one workspace.

``kgrader mcp --workspace DIR`` serves ``compile_kernel``, ``bench_kernel``,
``profile_kernel``, ``measure_peak``, ``accept_candidate`` and ``search_experience`` (see
:mod:`grader.agent.tools`) through the ``mcp`` package (v2:
:class:`mcp.server.mcpserver.MCPServer`). The workspace is fixed when the server starts,
so a client can send only kernel source (and search filters). Each tool's
result is the tool's dict, as structured content and as JSON text; a candidate's failure
is a normal result with ``ok: false``, not an MCP error. stdout carries the protocol
only: logs go to stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from grader import __version__
from grader.agent import tools as kt
from grader.agent.schemas import tool_description

__all__ = ["build_server", "serve"]

Source = Annotated[str, Field(description="Complete Python source of the kernel module.",
                              min_length=1)]

_INSTRUCTIONS = (
    "kgrader grades GPU kernels for one fixed task in a sandbox. Send the complete module "
    "source. compile_kernel checks it builds; bench_kernel checks correctness then times it; "
    "profile_kernel adds a roofline analysis; measure_peak gives the device ceilings; "
    "accept_candidate makes it the new best when it is measurably faster than the current best; "
    "search_experience returns past attempts with one-line lessons."
)


def build_server(workspace: str | Path) -> Any:
    """An :class:`MCPServer` bound to ``workspace`` (validated now: raises WorkspaceError)."""
    from mcp.server.mcpserver import MCPServer

    ws = kt.Workspace.open(workspace)
    server = MCPServer(name="kgrader", version=__version__, instructions=_INSTRUCTIONS)

    def compile_kernel(source: Source) -> dict[str, Any]:
        return kt.compile_kernel(ws, source)

    def bench_kernel(source: Source) -> dict[str, Any]:
        return kt.bench_kernel(ws, source)

    def profile_kernel(source: Source) -> dict[str, Any]:
        return kt.profile_kernel(ws, source)

    def measure_peak() -> dict[str, Any]:
        return kt.measure_peak(ws)

    def accept_candidate(source: Source) -> dict[str, Any]:
        return kt.accept_candidate(ws, source)

    def search_experience(text: str | None = None, task: str | None = None, tag: str | None = None,
                          stage: str | None = None, code: str | None = None,
                          outcome: str | None = None, dims: list[str] | None = None,
                          hardware: str | None = None, limit: int = 5,
                          include_source: bool = False) -> dict[str, Any]:
        args = {"text": text, "task": task, "tag": tag, "stage": stage, "code": code,
                "outcome": outcome, "dims": dims, "hardware": hardware, "limit": limit,
                "include_source": include_source}
        # The tool validates the values; a bad one is an ok: false result, as for a candidate.
        return kt.search_experience(ws, **{k: v for k, v in args.items() if v is not None})

    # Sync functions: the SDK runs them in a worker thread, so a long evaluation does not
    # block the protocol loop; the workspace lock in grader.agent.tools serialises them.
    for fn in (compile_kernel, bench_kernel, profile_kernel, measure_peak, accept_candidate,
               search_experience):
        server.add_tool(fn, name=fn.__name__, description=tool_description(fn.__name__))
    return server


def serve(workspace: str | Path) -> None:
    """Run the server on stdin/stdout until the client closes the connection."""
    build_server(workspace).run("stdio")
