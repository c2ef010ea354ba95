"""The acceptance decision from paired samples, and aggregates over tasks.

:func:`decide` computes both acceptance rules from ``sandbox.contract.rules`` (the same code the
judge runs, so host and sandbox cannot disagree on a number) and lets the task's
``AcceptanceSpec.rule`` decide. It never raises: too few pairs or a broken timing is a
rejection whose reason says so.

Aggregates (each labelled by its name, per the measurement protocol):

* :func:`geomean`: geometric mean computed in log space (no overflow on long products);
* :func:`fast_p`: KernelBench's fast_p, the share of tasks that are correct *and* have a
  speed-up strictly greater than ``p``;
* :func:`floored_geomean`: each speed-up clipped below at ``floor`` (default 1.0, so a
  slower kernel counts as "no gain" rather than a loss) before the log-space mean;
  incorrect tasks, when ``correct`` is given, count as ``floor``;
* :func:`bootstrap_ci`: percentile bootstrap confidence interval with a seeded
  ``random.Random`` so that a leaderboard is reproducible.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from grader.report.model import AcceptanceResult, RuleOutcome
from grader.task import AcceptanceSpec
from sandbox.contract import wire
from sandbox.contract.rules import (
    SeedRuleResult,
    SignTestResult,
    allowance,
    controlled_rule,
    seed_rule,
)
from sandbox.contract.stats import median, percentile

__all__ = [
    "bootstrap_ci",
    "controlled_outcome",
    "decide",
    "decide_with_replicate",
    "fast_p",
    "floored_geomean",
    "geomean",
    "seed_outcome",
]


def seed_outcome(t_cur: Sequence[float], t_cand: Sequence[float], spec: AcceptanceSpec) -> RuleOutcome:
    """The seed rule as a report :class:`RuleOutcome`."""
    res: SeedRuleResult = seed_rule(
        t_cur, t_cand,
        min_pairs=spec.min_pairs,
        min_improvement_fraction=spec.min_improvement_fraction,
        min_positive_fraction=spec.min_positive_fraction,
        offset_ms=spec.pair_offset_us / 1e3,
    )
    numbers = asdict(res)
    del numbers["accepted"], numbers["reason"]
    if res.median_r is not None:  # valid pairs: each side's median time (ms), for the tools
        numbers.update(median_current_ms=median(t_cur), median_candidate_ms=median(t_cand))
    return RuleOutcome(rule="seed", accepted=res.accepted, reason=res.reason, numbers=numbers)


def controlled_outcome(
    t_cur: Sequence[float], t_cand: Sequence[float], spec: AcceptanceSpec, gain: bool = False
) -> RuleOutcome:
    """The sequential sign-test rule as a report :class:`RuleOutcome`.

    ``min_pairs`` applies here too: a task that asks for at least that many pairs gets
    no acceptance from fewer, whatever the test says.
    """
    res: SignTestResult = controlled_rule(
        t_cur, t_cand, delta=spec.min_improvement_fraction, alpha=spec.alpha, looks=spec.looks,
        min_pairs=spec.min_pairs, point_margin=gain, offset_ms=spec.pair_offset_us / 1e3)
    accepted, reason = res.accepted, res.reason
    numbers: dict[str, Any] = asdict(res)
    del numbers["accepted"], numbers["reason"]
    last = res.last
    # Flat copies of the deciding look's numbers, so a reader need not dig into the list.
    numbers.update(
        looks=len(res.looks_taken),
        upper_bound=None if last is None else last.upper_bound,
        lower_bound=None if last is None else last.lower_bound,
        positives=None if last is None else last.positives,
        median_d=None if last is None else last.median_d,
        pairs_used=None if last is None else last.pairs,
    )
    return RuleOutcome(rule="gain" if gain else "controlled", accepted=accepted, reason=reason,
                       numbers=numbers)


def decide(t_cur: Sequence[float], t_cand: Sequence[float], spec: AcceptanceSpec) -> AcceptanceResult:
    """Both rules' outcomes; ``spec.rule`` names the one that decides. Never raises.

    ``improvement_fraction`` is the median of ``r_i = (t_cur - t_cand) / t_cur`` and
    ``positive_fraction`` the share of ``r_i > 0``, over all pairs given; both are
    ``None`` (with the reason in ``unmeasured``) when the timings cannot be judged.
    """
    try:
        seed = seed_outcome(t_cur, t_cand, spec)
        controlled = controlled_outcome(t_cur, t_cand, spec)
        gain = controlled_outcome(t_cur, t_cand, spec, gain=True)
    except Exception as e:  # never raise: a host-side bug must still yield a verdict
        reason = f"acceptance could not be computed: {type(e).__name__}: {e}"
        return AcceptanceResult(
            accepted=False, rule=spec.rule, improvement_fraction=None, pairs=len(t_cur),
            positive_fraction=None, reason=reason,
            unmeasured={"improvement_fraction": reason, "positive_fraction": reason},
        )
    deciding = {"seed": seed, "controlled": controlled, "gain": gain}[spec.rule]
    median_r = seed.numbers.get("median_r")
    pos_frac = seed.numbers.get("positive_fraction")
    unmeasured: dict[str, str] = {}
    if median_r is None:
        unmeasured["improvement_fraction"] = seed.reason if seed.numbers["pairs"] else "no pairs"
    if pos_frac is None:
        unmeasured["positive_fraction"] = seed.reason if seed.numbers["pairs"] else "no pairs"
    return AcceptanceResult(
        accepted=deciding.accepted,
        rule=spec.rule,
        improvement_fraction=median_r,
        pairs=int(seed.numbers["pairs"]),
        positive_fraction=pos_frac,
        reason=f"{spec.rule} rule: {deciding.reason}",
        rules=[seed, controlled, gain],
        unmeasured=unmeasured,
    )


def decide_with_replicate(rec: wire.AcceptanceRecord, spec: AcceptanceSpec) -> AcceptanceResult:
    """The whole decision: the deciding run by the task's rule, then the replicate's veto.

    Winner's curse: the reported speed-up comes from an independent replicate (new
    runners, buffers and seeds), and an acceptance stands only when that replicate
    measures a speed-up above ``(1 + spec.replicate_margin) * (1 + a)``, ``a`` the runner
    pair's offset allowance (``spec.pair_offset_us`` over the replicate's current median:
    a fresh pair carries an offset of its own). The judge runs the replicate
    exactly when this module's rule accepts the deciding run (it calls the same function).
    """
    result = decide(rec.deciding.t_cur, rec.deciding.t_cand, spec)
    rep = rec.replicate
    if rep is not None and rep.t_cur and rep.t_cand:
        speedup = median(rep.t_cur) / median(rep.t_cand)
        result.replicate_speedup = speedup
        need = (1.0 + spec.veto_margin) * (1.0 + allowance(rep.t_cur, spec.pair_offset_us / 1e3))
        if result.accepted and not speedup > need:
            result.accepted = False
            result.reason = (f"not confirmed: the independent replicate measured a speed-up of "
                             f"{speedup:.4f}x (needs > {need:.4f}x); deciding run said: "
                             f"{result.reason}")
        return result
    if result.accepted:
        result.accepted = False
        result.reason = "not confirmed: the independent replicate did not run"
    result.unmeasured["replicate_speedup"] = (
        f"replicate failed: {rec.replicate_error}" if rec.replicate_error else
        "no replicate: the deciding run did not accept the candidate")
    return result


# --- aggregates -----------------------------------------------------------------------


def _positive_finite(values: Sequence[float], what: str) -> list[float]:
    out = [float(v) for v in values]
    if not out:
        raise ValueError(f"{what} of no values")
    bad = [v for v in out if not (math.isfinite(v) and v > 0)]
    if bad:
        raise ValueError(f"{what} needs finite positive values, got {bad[0]!r}")
    return out


def geomean(values: Sequence[float]) -> float:
    """Geometric mean, computed as ``exp(mean(log v))``; values must be finite and > 0."""
    vals = _positive_finite(values, "geomean")
    return math.exp(math.fsum(math.log(v) for v in vals) / len(vals))


def fast_p(speedups: Sequence[float], correct: Sequence[bool], p: float = 1.0) -> float:
    """Share of tasks that are correct and have ``speedup > p`` (KernelBench's fast_p).

    The denominator is every task, so incorrect tasks count against the score.
    """
    if len(speedups) != len(correct):
        raise ValueError(f"{len(speedups)} speed-ups vs {len(correct)} correctness flags")
    if not speedups:
        raise ValueError("fast_p of no tasks")
    hits = sum(1 for s, ok in zip(speedups, correct, strict=True) if ok and math.isfinite(s) and s > p)
    return hits / len(speedups)


def floored_geomean(
    speedups: Sequence[float], floor: float = 1.0, correct: Sequence[bool] | None = None
) -> float:
    """Geometric mean of ``max(speedup, floor)``; incorrect tasks (if given) count as ``floor``.

    Definition: each speed-up is clipped below at ``floor`` *before* the log-space mean,
    so one regression cannot drag the aggregate under ``floor`` and a pile of
    regressions cannot hide one real gain.
    """
    if not (math.isfinite(floor) and floor > 0):
        raise ValueError(f"floor must be finite and positive, got {floor!r}")
    if correct is not None and len(correct) != len(speedups):
        raise ValueError(f"{len(speedups)} speed-ups vs {len(correct)} correctness flags")
    flags = list(correct) if correct is not None else [True] * len(speedups)
    clipped = [max(float(s), floor) if ok else floor for s, ok in zip(speedups, flags, strict=True)]
    return geomean(clipped)


def bootstrap_ci(
    values: Sequence[float],
    stat: Callable[[Sequence[float]], float] = geomean,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``stat`` over ``values``.

    Resamples with replacement ``resamples`` times using ``random.Random(seed)``, so the
    same inputs always give the same interval. Returns ``(low, high)``.
    """
    if not values:
        raise ValueError("bootstrap_ci of no values")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} outside (0, 1)")
    if resamples < 1:
        raise ValueError("resamples must be >= 1")
    rng = random.Random(seed)
    vals = list(values)
    stats = sorted(stat(rng.choices(vals, k=len(vals))) for _ in range(resamples))
    tail = (1 - confidence) / 2
    return percentile(stats, tail), percentile(stats, 1 - tail)
