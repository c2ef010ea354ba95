"""The acceptance decision in words a person reads at a glance, like nvbench's
SAME/FAST/SLOW/AMBIGUOUS: "1.42x faster than the current best (98% CI 1.38-1.46), accepted".

Nothing here is a new statistic: every figure comes from the acceptance record
(:class:`grader.report.model.AcceptanceResult`, built by :mod:`grader.measure.accept`):

* the speed-up is ``t_cur / t_cand``, the point estimate ``exp(-median d)`` with
  ``d = ln(t_cand / t_cur)`` over the deciding run's pairs (the sign-test rules' ``median_d``);
* its interval is ``exp(-upper_bound)`` to ``exp(-lower_bound)``, the sign test's
  order-statistic bounds on the median of ``d`` at the deciding look, each one-sided at
  ``alpha_per_look``: together a ``1 - 2 * alpha_per_look`` interval (98% at the
  default alpha 0.01 over one look);
* in a candidate's copy whose figures are withheld (:mod:`grader.report.withhold`) the
  speed-up is the coarse ``improvement_fraction`` said as a ratio, ``1 / (1 - f)``: the
  median of the pairs' ratios, as above, so the words and the fraction the copy keeps never
  disagree on the side of 1; with no interval. (The ratio of the two sides' paired medians,
  also kept, is used only when the fraction is absent: under noise it can fall on the
  other side of 1.)

The words: **faster** (accepted, or the whole interval above 1 but short of the task's
margin), **slower** (the whole interval below 1), **same within noise** (the interval
holds 1 and stays within the task's margin either way), **ambiguous: more pairs needed**
(the interval holds 1 and reaches past the margin, or there were too few pairs for one),
**not measured** (no valid pairs). A speed-up below 1 is also said as "Nx slower": a
ratio, never a percentage far below -100%.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from grader.report.model import AcceptanceResult, RuleOutcome

__all__ = ["Verdict", "acceptance_verdict", "improvement_speedup", "ratio", "speed_words"]

Kind = Literal["faster", "slower", "same", "ambiguous", "not_measured"]


@dataclass(frozen=True)
class Verdict:
    """One acceptance decision in words, with the figures the words were made from."""

    kind: Kind
    accepted: bool
    speedup: float | None  # t_cur / t_cand; None: not measured
    low: float | None  # the interval on the speed-up (None: none, or withheld)
    high: float | None
    confidence: float | None  # of that interval, e.g. 0.98
    text: str


def ratio(x: float) -> str:
    """A speed-up as people write it: ``38.5``, ``1.42``, ``1.004``, ``0.0553`` (three
    significant figures, three decimals near 1)."""
    if not math.isfinite(x):
        return str(x)
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1.01:
        return f"{x:.2f}"
    if x >= 0.99:  # near 1: three decimals, so that 1.004 is not "1.00"
        return f"{x:.3f}"
    if x < 1e-4:
        return f"{x:.1e}"
    return f"{x:.3g}" if f"{x:.3g}" != "1" else f"{x:.3f}"


def _ci(low: float, high: float, confidence: float) -> str:
    """``98% CI 1.38-1.46``; a narrow interval with more decimals, so that its ends stay
    apart and on their side of 1: ``98% CI 0.9996-1.0005``."""
    for width, places in ((1.01, 4), (1.05, 3)):
        if high < width * low and high < 10:
            return f"{100 * confidence:.3g}% CI {low:.{places}f}-{high:.{places}f}"
    return f"{100 * confidence:.3g}% CI {ratio(low)}-{ratio(high)}"


def speed_words(speedup: float, than: str = "the current best", note: str = "") -> str:
    """``1.42x faster than X (NOTE)`` / ``18.1x slower than X (0.0553x, NOTE)`` / ``as fast
    as X (1.000x, NOTE)`` (within 0.05%)."""
    if not (math.isfinite(speedup) and speedup > 0):
        return f"{speedup}x {than}" + (f" ({note})" if note else "")
    extra = f", {note}" if note else ""
    if ratio(speedup) == "1.000":
        return f"as fast as {than} ({ratio(speedup)}x{extra})"
    if speedup < 1:
        return f"{ratio(1 / speedup)}x slower than {than} ({ratio(speedup)}x{extra})"
    return f"{ratio(speedup)}x faster than {than}" + (f" ({note})" if note else "")


def improvement_speedup(improvement_fraction: float | None) -> float | None:
    """The speed-up ``t_cur / t_cand`` an ``improvement_fraction`` (the median of
    ``(t_cur - t_cand) / t_cur``) stands for: ``1 / (1 - r)``; None when there is none."""
    if improvement_fraction is None or not math.isfinite(improvement_fraction) \
            or improvement_fraction >= 1:
        return None
    return 1.0 / (1.0 - improvement_fraction)


def _num(numbers: dict[str, Any], key: str) -> float | None:
    v = numbers.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) \
        and math.isfinite(v) else None


def _sign_test(a: AcceptanceResult) -> RuleOutcome | None:
    """The outcome whose bounds the words use: the deciding rule's when it is a sign-test
    rule, else the controlled rule's (always computed beside the seed rule)."""
    by = {r.rule: r for r in a.rules}
    return by.get(a.rule) if a.rule in ("controlled", "gain") else by.get("controlled")


def _paired_speedup(a: AcceptanceResult) -> float | None:
    for r in a.rules:
        cur, cand = _num(r.numbers, "median_current_ms"), _num(r.numbers, "median_candidate_ms")
        if cur is not None and cand is not None and cur > 0 and cand > 0:
            return cur / cand
    return None


def _margin(out: RuleOutcome) -> float:
    """The task's margin in ``d`` (``ln(1 + delta)``) plus the runner pair's offset
    allowance at the deciding look."""
    delta = _num(out.numbers, "delta") or 0.0
    looks = out.numbers.get("looks_taken")
    last = looks[-1] if isinstance(looks, list) and looks and isinstance(looks[-1], dict) else {}
    allow = _num(last, "offset_allowance") or 0.0
    return math.log1p(delta) + math.log1p(allow)


def acceptance_verdict(a: AcceptanceResult, than: str = "the current best") -> Verdict:
    """``a`` in words (module docstring); never raises on a record's missing figures."""
    end = "accepted" if a.accepted else "rejected"
    rep = (f"; the independent replicate measured {ratio(a.replicate_speedup)}x"
           if a.accepted and a.replicate_speedup is not None else "")
    out = _sign_test(a)
    nums = out.numbers if out is not None else {}
    hi_d, lo_d, mid_d = (_num(nums, "upper_bound"), _num(nums, "lower_bound"),
                         _num(nums, "median_d"))
    alpha = _num(nums, "alpha_per_look")
    if mid_d is None:  # a copy with the figures withheld, or no valid pairs
        s = improvement_speedup(a.improvement_fraction) or _paired_speedup(a)
        if s is None:
            why = "no valid pairs" if a.pairs else "no pairs"
            return Verdict("not_measured", a.accepted, None, None, None, None,
                           f"not measured ({why}), {end}")
        kind: Kind = "faster" if a.accepted or s > 1 else "slower" if s < 1 else "same"
        return Verdict(kind, a.accepted, s, None, None, None,
                       f"{speed_words(s, than, 'median of pairs; interval withheld')}, {end}{rep}")
    s = math.exp(-mid_d)
    if hi_d is None or lo_d is None or alpha is None:
        return Verdict("ambiguous", a.accepted, s, None, None, None,
                       f"ambiguous: more pairs needed ({ratio(s)}x; {a.pairs} pairs give no "
                       f"interval at this level), {end}")
    low, high, conf = math.exp(-hi_d), math.exp(-lo_d), 1 - 2 * alpha
    ci = _ci(low, high, conf)
    margin = _margin(out) if out is not None else 0.0
    if a.accepted:
        return Verdict("faster", True, s, low, high, conf,
                       f"{speed_words(s, than, ci)}, accepted{rep}")
    if out is not None and out.accepted:  # the deciding run accepted; the replicate vetoed
        rep = ("the independent replicate did not run" if a.replicate_speedup is None else
               f"the independent replicate measured {ratio(a.replicate_speedup)}x")
        return Verdict("ambiguous", False, s, low, high, conf,
                       f"ambiguous: {speed_words(s, than, ci)} in the deciding run, not "
                       f"confirmed: {rep}, rejected")
    if lo_d > 0:
        return Verdict("slower", False, s, low, high, conf,
                       f"{speed_words(s, than, ci)}, rejected")
    if hi_d < 0:
        if lo_d >= -margin:
            return Verdict("faster", False, s, low, high, conf,
                           f"{speed_words(s, than, ci)}, less than the required margin "
                           f"(x{math.exp(margin):.3g}), rejected")
        return Verdict("ambiguous", False, s, low, high, conf,
                       f"ambiguous: more pairs needed: {speed_words(s, than, ci)}, not "
                       f"clearly past the required x{math.exp(margin):.3g}, rejected")
    if lo_d >= -margin and hi_d <= margin:
        return Verdict("same", False, s, low, high, conf,
                       f"same within noise ({ratio(s)}x, {ci}), rejected")
    return Verdict("ambiguous", False, s, low, high, conf,
                   f"ambiguous: more pairs needed ({ratio(s)}x, {ci}), rejected")
