"""Human-readable rendering of a report (rich). Machines use ``--json``.

Messages, warnings and reasons hold the candidate's text. Nothing of it is interpreted:
every line is a :class:`rich.text.Text` built from plain strings (no markup is parsed),
cleaned of control characters (:func:`sandbox.contract.text.clean`), and printed indented, with
its wrapped and continuation lines indented too. The verdict is the only line that starts
at the margin, so no text a candidate writes can draw a second one.
"""

from __future__ import annotations

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from grader.report.model import Report
from sandbox.contract.text import clean

_STEPS = frozenset({"scan", "sandbox", "judge", "compile", "correctness", "benchmark", "accept",
                    "teardown", "total"})  # the phases worth a line (SandboxInfo.phases)
_SHOWN = 100_000  # a report's own caps bound its text; this only bounds the terminal


def _fmt(v: float | None, unit: str = "", digits: int = 4) -> str:
    return "—" if v is None else f"{v:.{digits}g}{unit}"


def plain(value: object) -> str:
    """``value`` as text a terminal shows literally: control characters escaped, no
    surrogates. Build :class:`Text` from it (never a markup string)."""
    return clean(value, _SHOWN)


def say(console: Console, *parts: str | tuple[str, str], indent: int = 2) -> None:
    """One indented line (wrapped lines keep the indent) of plain text and styled parts."""
    line = Text.assemble(*[p if isinstance(p, tuple) else plain(p) for p in parts])
    console.print(Padding(line, (0, 0, 0, indent), expand=False), highlight=False)


def device_text(report: Report) -> str:
    """The device as people should read it: on the CPU, whether Triton ran through its
    interpreter (``TRITON_INTERPRET=1``: the figures are no GPU's)."""
    text = str(report.device)
    if report.environment.get("triton_interpret"):
        text += " (Triton interpreter)"
    return text


def render_report(report: Report, console: Console) -> None:
    verdict = ("PASS", "bold green") if report.ok else ("FAIL", "bold red")
    backend = f"  backend={report.sandbox.backend}" if report.sandbox is not None else ""
    console.print(Text.assemble(verdict, plain(f"  task={report.task}  stage={report.stage}  "
                                               f"device={device_text(report)}{backend}")),
                  highlight=False)
    if report.environment.get("triton_interpret"):
        say(console, "ran on the CPU through the Triton interpreter (TRITON_INTERPRET=1): "
                     "times are the interpreter's, not a GPU's")
    for e in report.errors:
        where = f" (line {e.line})" if e.line else ""
        say(console, (plain(f"{e.stage}/{e.code}"), "red"), f"{where}: {e.message}")
        if e.stage == "scan" and e.detail.get("threat"):
            say(console, f"threat: {e.detail['threat']}", indent=4)
    for w in report.warnings:
        say(console, ("warning", "yellow"), f": {w}")
    if report.correctness is not None:
        c = report.correctness
        say(console, f"correctness: {'passed' if c.passed else 'failed'}; {c.checks} checked calls "
                     f"over {len(c.shapes_checked)} shapes; max abs error {_fmt(c.max_abs_error)}")
    if report.timing is not None:
        t = report.timing
        tab = Table("ms: median", "mean", "p95", "std", "min", "cv", "GB/s (eff.)", "TFLOP/s",
                    title=Text(plain(f"timing: {t.samples} samples, {t.clock}, cache {t.cache}, "
                                     f"dims {t.dims}")))
        tab.add_row(_fmt(t.median_ms), _fmt(t.mean_ms), _fmt(t.p95_ms), _fmt(t.std_ms),
                    _fmt(t.min_ms), _fmt(t.cv, digits=2), _fmt(t.bandwidth_gbps), _fmt(t.tflops))
        console.print(Padding(tab, (0, 0, 0, 2), expand=False))
    if report.acceptance is not None:
        a = report.acceptance
        say(console, f"acceptance ({a.rule} rule): {'ACCEPTED' if a.accepted else 'rejected'} — "
                     f"{a.reason}")
        for r in a.rules:
            say(console, f"{r.rule}: {'accept' if r.accepted else 'reject'} — {r.reason}", indent=4)
        if a.replicate_speedup is not None:
            say(console, f"replicate speed-up (independent run): {a.replicate_speedup:.4f}x",
                indent=4)
    if report.sandbox is not None:
        s = report.sandbox
        say(console, f"sandbox: {s.backend}, wall {s.wall_s} s, exit {s.exit_code}, "
                     f"signal {s.signal}, limit fired: {s.limit_fired or 'none'}")
        if s.output_truncated:
            say(console, ("output cut", "yellow"),
                f": the sandbox printed more than the {s.limits.output_bytes} bytes kept "
                "(--output-bytes); only the first part of stdout and stderr is in the report",
                indent=4)
        steps = [f"{k} {v:.3g} s" for k, v in s.phases.items()
                 if k.split("_")[0] in _STEPS and isinstance(v, int | float)]
        if steps:
            say(console, "steps: " + ", ".join(steps), indent=4)
