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

from grader.report.model import CorrectnessResult, Report, SandboxInfo
from grader.report.text import plain
from grader.report.verdict import acceptance_verdict

# The phases worth a line (SandboxInfo.phases), in the order they run: a phase is listed
# by the step its name starts with; within a step the step's own total comes first, then
# its parts in the order they run (_PARTS), then any other in the record's order.
_STEPS = ("scan", "warm", "sandbox", "gate", "judge", "compile", "correctness", "benchmark",
          "accept", "teardown", "total")
_PARTS = ("compile_inputs", "compile_first_call")


def _fmt(v: float | None, unit: str = "", digits: int = 4) -> str:
    return "—" if v is None else f"{v:.{digits}g}{unit}"


def say(console: Console, *parts: str | tuple[str, str], indent: int = 2) -> None:
    """One indented line (wrapped lines keep the indent) of plain text and styled parts."""
    line = Text.assemble(*[p if isinstance(p, tuple) else plain(p) for p in parts])
    console.print(Padding(line, (0, 0, 0, indent), expand=False), highlight=False)


def device_text(report: Report) -> str:
    """The device as people should read it: on the CPU, whether Triton ran through its
    interpreter (``TRITON_INTERPRET=1``: the figures are no GPU's); "" when none was chosen
    (the run stopped before a device was)."""
    if report.device is None:
        return ""
    text = str(report.device)
    if report.environment.get("triton_interpret"):
        text += " (Triton interpreter)"
    return text


# Where a stage's calls spent the judge's time (sandbox.judge.evaluation.Evaluation.spent):
# in the JSON's phases, not in the steps line.
_CALL_SPLIT = tuple(f"{stage}_{part}" for stage in ("compile", "correctness", "benchmark", "accept")
                    for part in ("prepare", "send", "wait", "check", "empty"))


def ordered_steps(phases: dict[str, float]) -> list[tuple[str, float]]:
    """The phases worth a line, in the order they ran (``_STEPS``), not the record's key
    order (which may be alphabetical)."""
    rank = {name: i for i, name in enumerate(_STEPS)}
    kept = [(k, float(v)) for k, v in phases.items()
            if k.split("_")[0] in rank and k not in _CALL_SPLIT
            and isinstance(v, int | float) and not isinstance(v, bool)]

    def key(kv: tuple[str, float]) -> tuple[int, int]:
        name = kv[0]
        part = 0 if name in rank else 1 + _PARTS.index(name) if name in _PARTS else len(_PARTS) + 1
        return rank[name.split("_")[0]], part

    return sorted(kept, key=key)  # stable: the record's order among equals


def correctness_text(c: CorrectnessResult) -> str:
    """The correctness section in words: what was checked, or where it stopped."""
    err = f"max abs error {_fmt(c.max_abs_error)}" if c.max_abs_error is not None else \
        "error figures not measured"
    if c.passed:
        return (f"correctness: passed; {c.checks} checked calls over {len(c.shapes_checked)} "
                f"shapes; {err}")
    if c.first_bad is not None:
        fb = c.first_bad
        where = f" on a {fb.shape_kind} shape" if fb.shape_kind else ""
        stop = f"stopped at the first wrong output ({fb.tensor!r}{where}, {fb.phase} call)"
    else:
        stop = "stopped at the first failing call (the error above)"
    done = f" after {c.checks} good checked calls" if c.checks else ""
    return f"correctness: failed: {stop}{done}; {err}"


def sandbox_text(s: SandboxInfo) -> str:
    """The sandbox line: no Python literal (a missing figure is left out or said)."""
    parts = [f"sandbox: {s.backend}"]
    parts.append(f"wall {s.wall_s} s" if s.wall_s is not None else "wall time not reported")
    if s.exit_code is not None:
        parts.append(f"exit {s.exit_code}")
    if s.signal is not None:
        parts.append(f"killed by signal {s.signal}")
    elif s.exit_code is None:
        parts.append("no exit status")
    parts.append(f"limit fired: {s.limit_fired or 'none'}")
    return ", ".join(parts)


def render_report(report: Report, console: Console) -> None:
    verdict = ("PASS", "bold green") if report.ok else ("FAIL", "bold red")
    backend = f"  backend={report.sandbox.backend}" if report.sandbox is not None else ""
    stage = f"  stage={report.stage}" if report.stage is not None else "  stage=none reached"
    device = f"  device={device_text(report)}" if report.device is not None else ""
    console.print(Text.assemble(verdict, plain(f"  task={report.task or 'unknown'}{stage}"
                                               f"{device}{backend}")),
                  highlight=False)
    if report.acceptance is not None:  # the decision in words first, its figures below
        say(console, ("acceptance: ", "bold"),
            (plain(acceptance_verdict(report.acceptance).text),
             "green" if report.acceptance.accepted else "yellow"))
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
        say(console, correctness_text(report.correctness))
    if report.timing is not None:
        t = report.timing
        tab = Table("ms: median", "mean", "p95", "std", "min", "cv", "GB/s (eff.)", "TFLOP/s",
                    title=Text(plain(f"timing: {t.samples} samples, {t.clock}, cache {t.cache}, "
                                     f"dims {_dims(t.dims)}")))
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
        say(console, sandbox_text(s))
        if s.output_truncated:
            say(console, ("output cut", "yellow"),
                f": the sandbox printed more than the {s.limits.output_bytes} bytes kept "
                "(--output-bytes); only the first part of stdout and stderr is in the report",
                indent=4)
        steps = [f"{k} {v:.3g} s" for k, v in ordered_steps(s.phases)]
        if steps:
            say(console, "steps: " + ", ".join(steps), indent=4)


def _dims(dims: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in dims.items()) or "none"
