"""The acceptance rules on paired timings. Standard library only.

This module is imported inside the sandbox (the judge stops a sequential comparison
early) and on the host (``grader.measure.accept`` wraps it into report models), so it depends on
nothing but the standard library and, within its package, the sign test
(:mod:`sandbox.contract.signtest`).

Two acceptance rules work on paired timings ``t_cur[i]``, ``t_cand[i]`` (ms) measured in
one run, interleaved with alternating order:

* the **seed rule** (:func:`seed_rule`): per pair ``r_i = (t_cur - t_cand) / t_cur``;
  accepted when there are at least ``min_pairs`` pairs, ``median(r) >= delta`` and the
  share of ``r_i > 0`` is at least ``min_positive_fraction``. Simple and readable, but its
  false-accept rate is not controlled.
* the **controlled rule** (:class:`SequentialSignTest`, :func:`sequential_sign_test`): on
  ``d_i = ln(t_cand / t_cur)``, an exact sign-test (order-statistic) one-sided upper
  confidence bound on the median of ``d``; accepted when that bound is below
  ``-ln(1 + delta)``. Its false-accept rate is at most ``alpha`` whenever the true median
  improvement is below ``delta`` (see :class:`SequentialSignTest` for the argument).

**A runner pair's own offset** (``offset_ms``): two runners of the same source differ by a
small constant for their whole life (on an H200 ~0.09 us standard deviation between fresh
pairs, whatever the kernel's length: their CUDA contexts, streams, code copies). Pairs of
one run share it, so no number of pairs averages it away, and against a ~5 us kernel it is
a few percent, beyond a 1% margin. Every rule therefore asks for the margin *plus* that
allowance: with ``a = offset_ms / median(t_cur)`` (the current's own median time over the
pairs judged so far), the seed rule needs ``median(r) >= delta + a`` and the sign-test
rules move their thresholds by ``-ln(1 + a)``. At 1 ms an allowance of 0.25 us is 0.025%,
at 5 us 5%: short kernels need a larger gain to be accepted, never a smaller one.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from sandbox.contract.signtest import DEFAULT_LOOKS as DEFAULT_LOOKS
from sandbox.contract.signtest import Decision as Decision
from sandbox.contract.signtest import Look as Look
from sandbox.contract.signtest import SequentialSignTest as SequentialSignTest
from sandbox.contract.signtest import SignTestResult as SignTestResult
from sandbox.contract.signtest import allowance as allowance
from sandbox.contract.signtest import pair_problem as pair_problem
from sandbox.contract.signtest import sequential_sign_test as sequential_sign_test
from sandbox.contract.signtest import sign_test_rank as sign_test_rank

# --- the seed rule --------------------------------------------------------------------


@dataclass(frozen=True)
class SeedRuleResult:
    """The seed rule's verdict and every number behind it."""

    accepted: bool
    reason: str
    pairs: int
    median_r: float | None
    positive_fraction: float | None
    positives: int
    min_pairs: int
    min_improvement_fraction: float
    min_positive_fraction: float
    offset_allowance: float = 0.0


def seed_rule(
    t_cur: Sequence[float],
    t_cand: Sequence[float],
    *,
    min_pairs: int = 5,
    min_improvement_fraction: float = 0.01,
    min_positive_fraction: float = 0.6,
    offset_ms: float = 0.0,
) -> SeedRuleResult:
    """Apply the seed rule to paired timings; never raises on bad timings (not accepted)."""
    limits = (min_pairs, min_improvement_fraction, min_positive_fraction)
    problem = pair_problem(t_cur, t_cand)
    if problem is not None:
        return SeedRuleResult(False, problem, len(t_cur), None, None, 0, *limits)
    allow = allowance(t_cur, offset_ms)
    need = min_improvement_fraction + allow
    n = len(t_cur)
    r = [(c - k) / c for c, k in zip(t_cur, t_cand, strict=True)]
    positives = sum(1 for x in r if x > 0)
    med = statistics.median(r) if r else None
    pos_frac = positives / n if n else None
    if n < min_pairs:
        reason = f"{n} pairs < min_pairs {min_pairs}"
    elif med is not None and med < need:
        reason = (f"median improvement {med:.4f} < min_improvement_fraction {min_improvement_fraction}"
                  + (f" + offset allowance {allow:.4f}" if allow else ""))
    elif pos_frac is not None and pos_frac < min_positive_fraction:
        reason = (
            f"positive pairs {positives}/{n} = {pos_frac:.3f} "
            f"< min_positive_fraction {min_positive_fraction}"
        )
    else:
        return SeedRuleResult(
            True,
            f"median improvement {med:.4f} >= {need:.4g} with "
            f"{positives}/{n} positive pairs over {n} pairs",
            n, med, pos_frac, positives, *limits, allow,
        )
    return SeedRuleResult(False, reason, n, med, pos_frac, positives, *limits, allow)


def controlled_rule(t_cur: Sequence[float], t_cand: Sequence[float], *, delta: float, alpha: float,
                    looks: Sequence[int], min_pairs: int, point_margin: bool = False,
                    offset_ms: float = 0.0) -> SignTestResult:
    """The controlled rule as a task applies it (or, with ``point_margin``, the ``gain``
    variant): the sequential sign test, and no acceptance from fewer than ``min_pairs``
    pairs whatever the test says."""
    res = sequential_sign_test(t_cur, t_cand, delta=delta, alpha=alpha, looks=looks,
                               point_margin=point_margin, offset_ms=offset_ms)
    if pair_problem(t_cur, t_cand) is None and len(t_cur) < min_pairs:
        res = dataclasses.replace(res, accepted=False,
                                  reason=f"{len(t_cur)} pairs < min_pairs {min_pairs}; {res.reason}")
    return res


def rule_accepts(t_cur: Sequence[float], t_cand: Sequence[float], *, rule: str, min_pairs: int,
                 min_improvement_fraction: float, min_positive_fraction: float, alpha: float,
                 looks: Sequence[int], offset_ms: float = 0.0) -> bool:
    """Whether the task's deciding rule accepts these pairs: the judge asks this before it
    spends a replicate, the host asks the same function when it decides."""
    if rule == "seed":
        return seed_rule(t_cur, t_cand, min_pairs=min_pairs,
                         min_improvement_fraction=min_improvement_fraction,
                         min_positive_fraction=min_positive_fraction, offset_ms=offset_ms).accepted
    return controlled_rule(t_cur, t_cand, delta=min_improvement_fraction, alpha=alpha, looks=looks,
                           min_pairs=min_pairs, point_margin=rule == "gain",
                           offset_ms=offset_ms).accepted


def median_bounds(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free interval on the median of ``samples``: the order statistics
    ``x_(n+1-k)``, ``x_(k)`` with ``k`` from the sign test at (1-confidence)/2 on each side;
    None where there are too few samples for one."""
    xs = sorted(float(x) for x in samples)
    n = len(xs)
    k = sign_test_rank(n, (1 - confidence) / 2) if n else None
    if k is None or n + 1 - k > k:
        return None
    return xs[n - k], xs[k - 1]
