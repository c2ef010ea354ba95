"""``kgrader profile``: hardware counters and advice for one candidate.

Two forms share the name:

* ``kgrader profile TASK CANDIDATE`` -- a separate sandbox run under Nsight Compute
  (:mod:`grader.diagnostics.run`); prints counters per kernel and advice, or ``--json``.
  Exit 0 when the candidate built and ran (counters may still be ``null``, with reasons,
  e.g. on the CPU), 1 when the candidate failed (scan, compile, wrong values), 2 on a
  usage or infrastructure error (an error of origin ``infrastructure``).
* ``kgrader profile --workspace DIR FILE`` -- the ``profile_kernel`` agent tool's mirror
  (benchmark, roofline, counters, advice), as ``kgrader bench`` is ``bench_kernel``'s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from grader.backends.registry import sorted_choices
from grader.cli.common import EXIT_ERROR, EXIT_FAILED, EXIT_OK, fail, sweep_orphans
from grader.cli.progress import steps, wide_console
from grader.cli.tools import tool_exit_code
from grader.errors import KgraderError
from grader.report.render import say
from grader.report.text import plain


def register(cli: click.Group) -> None:
    cli.add_command(profile_cmd)


def _fmt(v: float | int | None, digits: int = 3) -> str:
    if v is None:
        return "—"
    return f"{v:,}" if isinstance(v, int) else f"{v:.{digits}g}"


def _render(result: Any, console: Console) -> None:
    # Kernel names, messages and advice carry the candidate's text: plain Text, never markup
    # (grader.report.render).
    d = result.diagnostics
    verdict = ("ran", "bold green") if result.ok else ("FAILED", "bold red")
    console.print(Text.assemble("profile ", verdict, plain(
        f"  task={result.task}  device={result.device}  tool={d.tool or '—'}  dims={d.dims}  "
        f"overhead {_fmt(d.profile_overhead_s)} s")), highlight=False)
    for e in result.errors:
        say(console, (plain(f"{e.stage}/{e.code}"), "red"),
            f"{f' (line {e.line})' if e.line else ''}: {e.message}")
    for w in result.warnings:
        say(console, ("warning", "yellow"), f": {w}")
    if d.kernels:
        tab = Table("kernel", "ms", "SM %", "DRAM %", "occ. %", "theor. %", "regs", "smem B",
                    "spill B", "L1 %", "L2 %", "bank confl.", "top stall",
                    title=f"counters (median of {d.profiled_calls} profiled calls)")
        for k in d.kernels:
            c = k.counters
            stall = f"{c.top_stalls[0].reason} {c.top_stalls[0].share_pct:.0f}%" if c.top_stalls else "—"
            tab.add_row(Text(plain(k.name[:40])), _fmt(c.duration_ms), _fmt(c.sm_throughput_pct),
                        _fmt(c.dram_throughput_pct), _fmt(c.achieved_occupancy_pct),
                        _fmt(c.theoretical_occupancy_pct), _fmt(c.registers_per_thread),
                        _fmt(c.shared_mem_per_block_bytes), _fmt(c.spill_bytes),
                        _fmt(c.l1_hit_rate_pct), _fmt(c.l2_hit_rate_pct), _fmt(c.bank_conflicts),
                        Text(plain(stall)))
        console.print(tab)
    if d.roofline_fraction is not None:
        say(console, f"roofline: {d.bound}-bound, {100 * d.roofline_fraction:.0f}% of the bound")
    for line in d.advice:
        say(console, ("advice", "cyan"), f": {line}")
    for key, why in d.unmeasured.items():
        say(console, (plain(f"{key}: {why}"), "dim"))
    for note in d.notes:
        say(console, (plain(f"note: {note}"), "dim"))


@click.command("profile")
@click.argument("args", nargs=-1, metavar="TASK CANDIDATE | -w DIR FILE")
@click.option("--workspace", "-w", type=click.Path(path_type=Path, file_okay=False),
              help="Run the profile_kernel tool on FILE in this workspace instead.")
@click.option("--backend", type=click.Choice(sorted_choices()), default="auto", show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda", "rocm"]), default="auto", show_default=True)
@click.option("--policy", help="Policy name or path (default: the task's).")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object on stdout.")
@click.option("--gpu", "gpus", multiple=True, help="GPU id or UUID to expose (repeatable).")
def profile_cmd(args: tuple[str, ...], workspace: Path | None, backend: str, device: str,
                policy: str | None, as_json: bool, gpus: tuple[str, ...]) -> None:
    """Hardware counters per kernel (Nsight Compute, in the sandbox) and advice.

    TASK CANDIDATE: a separate, untimed sandbox run. With --workspace: the profile_kernel
    agent tool on FILE (benchmark + roofline + counters), printed as JSON.
    """
    try:
        if workspace is not None:
            _tool_mirror(workspace, args)
            return
        if len(args) != 2:
            raise click.UsageError("expected TASK CANDIDATE (or --workspace DIR FILE)")
        from grader.diagnostics.run import ProfileRequest, profile

        sweep_orphans()
        with steps("profile") as lines:
            lines.step("start", {"task": args[0], "candidate": Path(args[1]).name})
            result = profile(ProfileRequest(task_dir=Path(args[0]), candidate=Path(args[1]),
                                            backend=backend, device=device, policy=policy,
                                            gpu_ids=gpus))
            lines.step("done", {"ok": str(result.ok).lower()})
    except KgraderError as e:
        fail(e)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        _render(result, wide_console())
    if any(e.origin == "infrastructure" for e in result.errors):
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_OK if result.ok else EXIT_FAILED)


def _tool_mirror(workspace: Path, args: tuple[str, ...]) -> None:
    if len(args) != 1:
        raise click.UsageError("with --workspace, give exactly one FILE")
    from grader.agent.tools import call_tool
    from grader.scan import read_candidate

    source = read_candidate(Path(args[0]))
    sweep_orphans()
    result = call_tool(workspace, "profile_kernel", {"source": source})
    click.echo(json.dumps(result, indent=2, ensure_ascii=False, default=str))
    sys.exit(tool_exit_code(result))
