"""Human-readable rendering of a report (rich). Machines use ``--json``."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from grader.report.model import Report


def _fmt(v: float | None, unit: str = "", digits: int = 4) -> str:
    return "—" if v is None else f"{v:.{digits}g}{unit}"


def render_report(report: Report, console: Console) -> None:
    verdict = "[bold green]PASS[/]" if report.ok else "[bold red]FAIL[/]"
    console.print(f"{verdict}  task={report.task}  stage={report.stage}  device={report.device}")
    for e in report.errors:
        where = f" (line {e.line})" if e.line else ""
        console.print(f"  [red]{e.stage}/{e.code}[/]{where}: {e.message}")
    for w in report.warnings:
        console.print(f"  [yellow]warning[/]: {w}")
    if report.correctness is not None:
        c = report.correctness
        console.print(f"  correctness: {'passed' if c.passed else 'failed'}; {c.checks} checked calls over "
                      f"{len(c.shapes_checked)} shapes; max abs error {_fmt(c.max_abs_error)}")
    if report.timing is not None:
        t = report.timing
        tab = Table("ms: median", "mean", "p95", "std", "min", "cv", "GB/s (eff.)", "TFLOP/s",
                    title=f"timing: {t.samples} samples, {t.clock}, cache {t.cache}, dims {t.dims}")
        tab.add_row(_fmt(t.median_ms), _fmt(t.mean_ms), _fmt(t.p95_ms), _fmt(t.std_ms),
                    _fmt(t.min_ms), _fmt(t.cv, digits=2), _fmt(t.bandwidth_gbps), _fmt(t.tflops))
        console.print(tab)
    if report.acceptance is not None:
        a = report.acceptance
        console.print(f"  acceptance ({a.rule} rule): {'ACCEPTED' if a.accepted else 'rejected'} — {a.reason}")
        for r in a.rules:
            console.print(f"    {r.rule}: {'accept' if r.accepted else 'reject'} — {r.reason}")
        if a.replicate_speedup is not None:
            console.print(f"    replicate speed-up (independent run): {a.replicate_speedup:.4f}x")
    if report.sandbox is not None:
        s = report.sandbox
        console.print(f"  sandbox: {s.backend}, wall {s.wall_s} s, exit {s.exit_code}, signal {s.signal}, "
                      f"limit fired: {s.limit_fired or 'none'}")
