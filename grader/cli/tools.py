"""CLI for the agent tools: ``tool``, ``tools schema``, ``mcp``, ``workspace init``,
the mirrors ``compile|bench|profile|accept`` and ``calibrate``.

Thin: parses arguments, calls :mod:`grader.agent.tools` / :mod:`grader.measure.peaks`, prints JSON
on stdout (``--json`` is accepted everywhere and also puts a failure's error document
on stdout). Exit codes: 0 the tool's ``ok`` is true; 1 it is false (the candidate failed
or was rejected); 2 unusable input (bad JSON, unknown tool, no workspace, a source that
cannot be read: ``bad_candidate_file``, as under ``kgrader run``) or an infrastructure
fault, with a one-line ``error:`` on stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from rich.table import Table

from grader.backends.registry import backend_choices
from grader.cli.common import (
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_OK,
    check_outputs,
    fail,
    json_option,
    kgrader_errors,
    sweep_orphans,
)
from grader.cli.progress import steps, wide_console

F = TypeVar("F", bound=Callable[..., Any])
_BACKENDS = click.Choice(backend_choices())
_DEVICES = click.Choice(["auto", "cpu", "cuda", "rocm"])


def register(cli: click.Group) -> None:
    """Add the tool, tools, mcp, workspace, compile/bench/profile/accept and calibrate commands."""
    for cmd in (tool_cmd, tools_group, mcp_cmd, workspace_group, calibrate_cmd, *_MIRRORS):
        cli.add_command(cmd)


def tool_exit_code(result: dict[str, Any]) -> int:
    """0 ok; 2 when nothing was graded (a source that cannot be read, the same code as
    ``kgrader run`` gives a candidate file that cannot be read; the caller's arguments;
    the machine's fault); else 1."""
    if result.get("ok"):
        return EXIT_OK
    errors = result.get("errors") or []
    if any(e.get("code") == "bad_candidate_file" or e.get("origin") in ("infrastructure", "usage")
           for e in errors):
        return EXIT_ERROR
    return EXIT_FAILED


def _with_steps(tool: str, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    with steps(tool) as lines:
        lines.step("start")
        result = call()
        lines.step("done", {"ok": str(bool(result.get("ok"))).lower()})
    return result


def _emit(result: dict[str, Any]) -> NoReturn:
    click.echo(json.dumps(result, indent=2, ensure_ascii=False, default=str))
    sys.exit(tool_exit_code(result))


_workspace_opt = click.option("--workspace", "-w", required=True,
                              type=click.Path(path_type=Path, file_okay=False),
                              help="Workspace folder (made by `kgrader workspace init`).")


# --- kgrader tool / tools schema ------------------------------------------------------


@click.command("tool")
@click.argument("name")
@_workspace_opt
@click.option("--args", "args_json", default="{}", show_default=True,
              help="Tool arguments as a JSON object, or @FILE to read the JSON from FILE.")
@json_option
@kgrader_errors
def tool_cmd(name: str, workspace: Path, args_json: str, as_json: bool) -> None:
    """Run agent tool NAME on the workspace; print its JSON return."""
    from grader.agent.schemas import check_args
    from grader.agent.tools import call_tool

    text = args_json
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            fail(f"cannot read --args file {text[1:]}: {e}")
    try:
        args = json.loads(text)
    except json.JSONDecodeError as e:
        fail(f"--args is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}")
    check_args(name, args)  # unknown tool or wrong arguments: exit 2 before any work
    sweep_orphans()
    _emit(_with_steps(name, lambda: call_tool(workspace, name, args)))


@click.group("tools")
def tools_group() -> None:
    """The agent tools' definitions."""


@tools_group.command("schema")
@json_option
def tools_schema(as_json: bool) -> None:
    """Print the tools' JSON schemas (function-calling format)."""
    from grader.agent.schemas import tool_schemas

    click.echo(json.dumps(tool_schemas(), indent=2))


@click.command("mcp")
@_workspace_opt
@json_option
@kgrader_errors
def mcp_cmd(workspace: Path, as_json: bool) -> None:
    """Serve the agent tools for WORKSPACE over MCP (stdio transport)."""
    try:
        from grader.agent.mcp_server import build_server
    except ImportError as e:  # pragma: no cover - the optional dependency is missing
        fail(f"the MCP server needs the `mcp` package (pip install 'kgrader[mcp]'): {e}")
    build_server(workspace).run("stdio")


# --- kgrader workspace init -----------------------------------------------------------


@click.group("workspace")
def workspace_group() -> None:
    """Set up agent-tool workspaces."""


@workspace_group.command("init")
@click.argument("directory", metavar="DIR", type=click.Path(path_type=Path, file_okay=False))
@click.option("--task", "task_dir", required=True, type=click.Path(path_type=Path),
              help="Task folder (task.json + reference.py) the workspace is fixed to.")
@click.option("--backend", type=_BACKENDS, default="auto", show_default=True)
@click.option("--device", type=_DEVICES, default="auto", show_default=True)
@click.option("--policy", help="Policy name or path (default: the task's).")
@click.option("--quick-calibration", is_flag=True, help="Use the short peak calibration.")
@click.option("--force", is_flag=True, help="Overwrite an existing kgrader.json.")
@click.option("--server", default=None, metavar="URL",
              help="Grade on a kgrader serve server (token from $KGRADER_TOKEN) instead of "
                   "local sandboxes.")
@click.option("--server-task", default=None, help="The server's name of the task (default: "
              "the task's own name).")
@json_option
@kgrader_errors
def workspace_init(directory: Path, task_dir: Path, backend: str, device: str, policy: str | None,
                   quick_calibration: bool, force: bool, server: str | None,
                   server_task: str | None, as_json: bool) -> None:
    """Create workspace DIR fixed to TASK_DIR; print its kgrader.json."""
    from grader.agent.tools import init_workspace

    check_outputs(dirs={"DIR": directory})
    ws = init_workspace(directory, task_dir, backend=backend, device=device, policy=policy,
                        quick_calibration=quick_calibration, force=force, server=server,
                        server_task=server_task)
    click.echo(ws.config.model_dump_json(indent=2))


# --- mirrors: kgrader compile|bench|profile|accept --workspace DIR FILE ---------------


def _mirror(cmd_name: str, tool: str) -> click.Command:
    @click.command(cmd_name, help=f"Run the {tool} tool on FILE's source; print its JSON return.")
    @_workspace_opt
    @click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
    @json_option
    @kgrader_errors
    def command(workspace: Path, file: Path, as_json: bool) -> None:
        from grader.agent.tools import call_tool
        from grader.scan import read_candidate

        source = read_candidate(file)
        sweep_orphans()
        _emit(_with_steps(tool, lambda: call_tool(workspace, tool, {"source": source})))

    return command


# `kgrader profile -w DIR FILE` lives in grader/cli/diagnostics.py (it also takes TASK CANDIDATE).
_MIRRORS = tuple(_mirror(c, t) for c, t in (("compile", "compile_kernel"), ("bench", "bench_kernel"),
                                             ("accept", "accept_candidate")))


# --- kgrader calibrate ----------------------------------------------------------------


@click.command("calibrate")
@click.option("--backend", type=_BACKENDS, default="auto", show_default=True)
@click.option("--device", type=_DEVICES, default="auto", show_default=True)
@click.option("--refresh", is_flag=True, help="Measure even when the cache has an entry.")
@click.option("--quick", is_flag=True, help="Short calibration (smaller buffers, fewer reps).")
@click.option("--hardware", type=click.Path(path_type=Path, dir_okay=False),
              help="Cache file (default: $KGRADER_HARDWARE or ~/.cache/kgrader/hardware.json).")
@click.option("--json", "as_json", is_flag=True, help="Print the calibration as JSON.")
@kgrader_errors
def calibrate_cmd(backend: str, device: str, refresh: bool, quick: bool, hardware: Path | None,
                  as_json: bool) -> None:
    """Measure (or read from the cache) the device's copy bandwidth and matmul peaks."""
    from grader.measure.peaks import get_peaks

    check_outputs(files={"--hardware": hardware})
    sweep_orphans()
    with steps("calibrate") as lines:
        lines.step("start", {"quick": str(quick).lower()})
        cal = get_peaks(backend, device, refresh=refresh, quick=quick, path=hardware)
        lines.step("done", {"cached": str(cal.cached).lower()})
    if as_json:
        click.echo(cal.model_dump_json(indent=2))
        return
    source = "cache" if cal.cached else "measured now"
    table = Table(title=f"peaks: {cal.device} via {cal.backend} ({source}, "
                        f"{'quick' if cal.quick else 'full'}, {cal.measured_at})")
    table.add_column("ceiling")
    table.add_column("value", justify="right")
    peaks = cal.peaks
    table.add_row("copy bandwidth", f"{peaks.get('bandwidth_gbps', float('nan')):.4g} GB/s")
    per = peaks.get("matmul_tflops") or {}
    for dtype, value in per.items():
        table.add_row(f"matmul {dtype}", f"{value:.4g} TFLOP/s")
    env = cal.environment
    console = wide_console()
    console.print(table)
    console.print(f"device {env.get('device_name', '?')}  torch {env.get('torch', '?')}  "
                  f"triton {env.get('triton', '?')}  key {cal.probe_key[:12]}")
