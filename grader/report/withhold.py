"""The figures of a candidate's copy that a runner chose after it saw a hidden shape.

The judge marks taint by time (``sandbox.judge.taint``, the report's :class:`Taint`): once
the candidate or the current best has been called on a hidden shape, what its outputs and
times determine can encode that shape. Its outputs choose the first bad element, the
error maxima and the mismatch fraction; its times choose every per-call figure, the
summary statistics and the phases' durations. :func:`withhold` is the candidate-facing
copy's treatment of what is marked, as messages are withheld in ``grader.grading.redact``
(which calls it); the operator's report keeps every figure.

* correctness: ``max_abs_error``, ``max_rel_error``, ``mismatch_fraction`` are null, the
  first bad element keeps only its tensor, dims (labelled there), kind and phase;
* timing (``timing`` and ``timing_current``): the median is kept to
  :data:`TIME_DIGITS` significant digits (bandwidth and throughput follow from it), the
  other statistics, the per-call clocks, the escape check's figures and the device state
  are withheld;
* acceptance: the verdict, the pair count and the share of positive pairs stay; the
  improvement and the replicate's speed-up keep :data:`TIME_DIGITS` digits; each rule's
  numbers keep only the task's settings and both sides' paired medians at that precision,
  and the reasons (host
  text full of the figures) become a neutral sentence;
* phases: only those the judge measured before the mark (and the host's scan and set-up)
  stay; the sandbox's wall time is withheld.

A report without the judge's mark (an older stored report) counts as marked everywhere
when its task has hidden shapes (fail closed). What is left, and how many bits it can
carry, is in docs/security-review.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grader.report.model import (
    AcceptanceResult,
    BadElement,
    CorrectnessResult,
    Report,
    SandboxInfo,
    TimingStats,
)
from sandbox.contract.rules import median_bounds

__all__ = ["REASON", "TIME_DIGITS", "Marked", "coarse", "marked", "withhold"]

REASON = ("withheld: measured after the candidate was called on hidden shapes, so it may encode "
          "them (the operator's report keeps it)")
COARSE = f"kept to {{}} significant digits: {REASON}"
# Significant digits of a time (or a ratio of times) in a candidate's copy: finer than the
# run-to-run noise of a GPU timing (1-3 %), coarse enough to bound what one figure carries.
TIME_DIGITS = 3
SECTIONS = ("correctness", "timing", "acceptance", "diagnostics")
_STATS = ("mean_ms", "p95_ms", "std_ms", "min_ms", "cv")
_PAIRED = ("median_current_ms", "median_candidate_ms")  # the agent tools' paired medians
_TASK_NUMBERS = ("min_improvement_fraction", "min_positive_fraction", "min_pairs", "alpha",
                 "delta")  # the task's own settings, copied into each rule's numbers
# The host's own phases from before the judge starts (a warm pool's idle wait included).
_HOST_EARLY_PHASES = frozenset({"scan", "sandbox_setup", "warm_idle"})


@dataclass(frozen=True)
class Marked:
    """What of one report is tainted: its sections, and the judge's phases measured after
    the mark (``None``: every phase of the judge's)."""

    started: bool
    sections: frozenset[str]
    phases: frozenset[str] | None

    def __contains__(self, section: object) -> bool:
        return section in self.sections


def marked(report: Report, has_hidden: bool) -> Marked:
    """The judge's mark as written; without one, everything when the task has hidden shapes."""
    t = report.taint
    if t is None:
        return Marked(has_hidden, frozenset(SECTIONS) if has_hidden else frozenset(), None)
    if t.hidden_phase is None:
        return Marked(False, frozenset(), frozenset())
    return Marked(True, frozenset(t.sections), frozenset(t.phases))


def coarse(x: float | None, digits: int = TIME_DIGITS) -> float | None:
    """``x`` to ``digits`` significant digits (idempotent)."""
    return None if x is None else float(f"{x:.{digits}g}")


def _correctness(c: CorrectnessResult, out: dict[str, str]) -> CorrectnessResult:
    for k in ("max_abs_error", "max_rel_error", "mismatch_fraction"):
        if getattr(c, k) is not None:
            out[f"correctness.{k}"] = REASON
    fb = c.first_bad
    if fb is not None:
        out["correctness.first_bad"] = REASON
        fb = BadElement(tensor=fb.tensor, index=[], expected=None, actual=None, dims=fb.dims,
                        seed=None, shape_kind=fb.shape_kind, phase=fb.phase)
    return c.model_copy(update={"max_abs_error": None, "max_rel_error": None,
                                "mismatch_fraction": None, "first_bad": fb})


def _timing(t: TimingStats, name: str, out: dict[str, str]) -> TimingStats:
    median = coarse(t.median_ms)
    assert median is not None
    scale = median / t.median_ms if t.median_ms > 0 else 1.0
    unmeasured = dict(t.unmeasured)
    for k in _STATS:
        if getattr(t, k) is not None:
            unmeasured[k] = out[f"{name}.{k}"] = REASON
    for k, empty in (("clocks", {}), ("escape", {}), ("device_state", [])):
        if getattr(t, k) != empty:
            out[f"{name}.{k}"] = REASON
    out[f"{name}.median_ms"] = COARSE.format(TIME_DIGITS)
    # The median's 95% interval (two order statistics of the samples) stays, as coarse as the
    # median: a board ranks on it, and it carries no more than two more such figures.
    bounds = median_bounds(t.clocks.get("samples_ms", []))
    kept = {"median_ci_ms": [float(coarse(b) or 0.0) for b in bounds]} if bounds is not None else \
        {k: v for k, v in t.clocks.items() if k == "median_ci_ms"}  # a copy redacted again
    return t.model_copy(update={
        "median_ms": median, **{k: None for k in _STATS}, "clocks": kept, "escape": {},
        "device_state": [], "unmeasured": unmeasured,
        # Both are the cost model over the median: no more than the median carries.
        "bandwidth_gbps": None if t.bandwidth_gbps is None else coarse(t.bandwidth_gbps / scale),
        "tflops": None if t.tflops is None else coarse(t.tflops / scale)})


def _acceptance(a: AcceptanceResult, out: dict[str, str]) -> AcceptanceResult:
    verdict = "accepted" if a.accepted else "not accepted"
    neutral = (f"{a.rule} rule: {verdict} over {a.pairs} pairs (the figures behind it are "
               "withheld: measured after the candidate was called on hidden shapes)")
    rules = []
    for r in a.rules:
        nums = {k: coarse(v) for k, v in r.numbers.items()
                if k in _PAIRED and isinstance(v, float)}
        nums.update({k: v for k, v in r.numbers.items() if k in _TASK_NUMBERS})
        rules.append(r.model_copy(update={"numbers": nums, "reason": f"{r.rule} rule: "
                                          f"{'accepted' if r.accepted else 'not accepted'}"}))
    out["acceptance.rules"] = f"numbers and reasons {REASON}"
    out["acceptance.reason"] = REASON
    for k in ("improvement_fraction", "replicate_speedup"):
        if getattr(a, k) is not None:
            out[f"acceptance.{k}"] = COARSE.format(TIME_DIGITS)
    return a.model_copy(update={
        "improvement_fraction": coarse(a.improvement_fraction),
        "replicate_speedup": coarse(a.replicate_speedup), "reason": neutral, "rules": rules,
        "unmeasured": {k: REASON for k in a.unmeasured}})


def _sandbox(sb: SandboxInfo, m: Marked, out: dict[str, str]) -> SandboxInfo:
    keep = {k: v for k, v in sb.phases.items()
            if k in _HOST_EARLY_PHASES or (m.phases is not None and k not in m.phases
                                           and k not in ("teardown", "total"))}
    for k in sb.phases:
        if k not in keep:
            out[f"sandbox.phases.{k}"] = REASON
    if sb.wall_s is not None:
        out["sandbox.wall_s"] = REASON
    return sb.model_copy(update={"phases": keep, "wall_s": None})


def withhold(report: Report, m: Marked) -> dict[str, Any]:
    """The fields of ``report``'s candidate-facing copy that ``m`` changes (a
    ``model_copy`` update, with ``withheld``: each changed path and why)."""
    out: dict[str, str] = dict(report.withheld)
    upd: dict[str, Any] = {}
    if "correctness" in m and report.correctness is not None:
        upd["correctness"] = _correctness(report.correctness, out)
    for name in ("timing", "timing_current"):
        t = getattr(report, name)
        if "timing" in m and t is not None:
            upd[name] = _timing(t, name, out)
    if "acceptance" in m and report.acceptance is not None:
        upd["acceptance"] = _acceptance(report.acceptance, out)
    if m.started and report.sandbox is not None:
        upd["sandbox"] = _sandbox(report.sandbox, m, out)
    upd["withheld"] = out
    return upd
