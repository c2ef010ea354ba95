"""The exact sign test behind the controlled and gain rules, and the checks every rule
shares (valid pairs, a runner pair's offset allowance). Standard library only; imported by
:mod:`sandbox.contract.rules`, which holds the rules as tasks apply them (see its docstring
for the rules, their error control and the offset allowance)."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Literal

Decision = Literal["accept", "reject", "continue"]
DEFAULT_LOOKS: tuple[int, ...] = (25, 50, 100, 200)


# --- pair validation ------------------------------------------------------------------


def pair_problem(t_cur: Sequence[float], t_cand: Sequence[float]) -> str | None:
    """Why these paired timings cannot be judged, or ``None`` when they can.

    Timings must come in equal numbers and be finite and positive: a zero or NaN time is
    a measurement fault, and the log-ratio of the controlled rule is undefined on it.
    """
    if len(t_cur) != len(t_cand):
        return f"unpaired timings: {len(t_cur)} current vs {len(t_cand)} candidate"
    for name, seq in (("current", t_cur), ("candidate", t_cand)):
        for i, t in enumerate(seq):
            try:
                ok = math.isfinite(float(t)) and float(t) > 0
            except (TypeError, ValueError):
                ok = False
            if not ok:
                return f"{name} timing #{i} is {t!r}; timings must be finite and positive"
    return None


def allowance(t_cur: Sequence[float], offset_ms: float) -> float:
    """The offset allowance as a fraction of the current's median time (0 without one)."""
    if offset_ms <= 0 or not t_cur:
        return 0.0
    mid = statistics.median(t_cur)
    return offset_ms / mid if mid > 0 else 0.0


# --- the exact sign test --------------------------------------------------------------


@lru_cache(maxsize=4096)
def sign_test_rank(n: int, alpha: float) -> int | None:
    """Smallest ``k`` with ``P(Binomial(n, 1/2) >= k) <= alpha``; ``None`` if none ``<= n``.

    With ``d_(1) <= ... <= d_(n)`` sorted, ``d_(k)`` is then a one-sided upper confidence
    bound of level ``1 - alpha`` on the median ``m`` of ``d``: ``d_(k) < m`` needs at
    least ``k`` of the ``d_i`` below ``m``, and each is below ``m`` with probability at
    most 1/2 (also with ties), so that happens with probability at most ``alpha``. By
    symmetry ``d_(n + 1 - k)`` is a lower bound of the same level. Computed exactly in
    integers (``Fraction(alpha)``): floats would overflow ``2**n`` beyond n = 1023.
    """
    if n < 1:
        return None
    budget = Fraction(alpha) * (1 << n)  # alpha * 2^n, exact
    tail = 0  # sum_{i >= k} C(n, i), built from the top down
    k = n + 1
    while k > 0:
        nxt = tail + math.comb(n, k - 1)
        if nxt > budget:
            break
        tail = nxt
        k -= 1
    return k if k <= n else None


@dataclass(frozen=True)
class Look:
    """The numbers of one interim analysis of the controlled rule."""

    pairs: int
    alpha: float
    rank: int | None
    upper_bound: float | None
    lower_bound: float | None
    below_threshold: int
    above_threshold: int
    positives: int
    median_d: float
    decision: Decision
    threshold: float = 0.0
    offset_allowance: float = 0.0


@dataclass
class SignTestResult:
    """The controlled rule's verdict and every number behind it."""

    decision: Decision
    accepted: bool
    reason: str
    delta: float
    alpha: float
    alpha_per_look: float
    threshold: float
    looks_planned: list[int]
    pairs: int
    looks_taken: list[Look] = field(default_factory=list)
    offset_ms: float = 0.0

    @property
    def last(self) -> Look | None:
        """The latest look taken, if any."""
        return self.looks_taken[-1] if self.looks_taken else None


class SequentialSignTest:
    """The controlled rule, fed one pair at a time so the judge can stop early.

    Decisions are made only at look boundaries (the pair counts in ``looks``, default
    25/50/100/200). At a look with ``n`` pairs and ``k = sign_test_rank(n, alpha / K)``
    (``K = len(looks)``):

    * **accept** when the upper bound ``d_(k)`` is below ``threshold = -ln(1 + delta)``,
      i.e. at least ``k`` pairs have ``d_i < threshold``;
    * **reject for futility** when the lower bound ``d_(n + 1 - k)`` is above the
      threshold (an improvement of ``delta`` is implausible), or at the last look;
    * otherwise **continue**.

    Error control (Bonferroni): each look's accept test has false-accept probability at
    most ``alpha / K`` when the true median improvement is below ``delta``; a union bound
    over at most ``K`` looks gives at most ``alpha`` in total, however the looks depend on
    each other. Futility stops only remove chances to accept, so they never raise the
    false-accept rate. Bonferroni is conservative; Pocock or O'Brien-Fleming boundaries
    would be tighter, at the price of a harder-to-audit computation.

    ``finish()`` takes one final look at the current pair count when data ran out between
    planned looks; it replaces an unreached planned look, so the looks taken stay at most
    ``K`` and the bound above still holds.
    """

    def __init__(self, delta: float, alpha: float, looks: Sequence[int] = DEFAULT_LOOKS,
                 point_margin: bool = False, offset_ms: float = 0.0) -> None:
        """``point_margin`` (the ``gain`` rule): test "any gain" (threshold 0) and put the
        margin ``delta`` on the point estimate instead: accept when the upper bound on the
        median ``d`` is below 0 **and** the median ``d`` itself is at most
        ``-ln(1 + delta)``. Its false-accept rate for candidates with no gain is controlled
        at ``alpha`` like the controlled rule's; candidates with a gain below the margin can
        be accepted, with a probability that falls as their gain does.

        ``offset_ms``: a runner pair's offset allowance (module docstring): at each look both
        the threshold and the point margin move by ``-ln(1 + a)``, ``a`` from the current's
        median time over the pairs so far; ``threshold`` stays the value without it."""
        if not 0 <= delta < 1:
            raise ValueError(f"delta {delta} outside [0, 1)")
        if not 0 < alpha < 0.5:
            raise ValueError(f"alpha {alpha} outside (0, 0.5)")
        if not (math.isfinite(offset_ms) and offset_ms >= 0):
            raise ValueError(f"offset_ms {offset_ms} must be finite and >= 0")
        planned = list(looks)
        if not planned or any(b <= a for a, b in itertools.pairwise(planned)) or planned[0] < 1:
            raise ValueError(f"looks must be positive and strictly increasing, got {planned}")
        self.delta = delta
        self.alpha = alpha
        self.looks = planned
        self.alpha_per_look = alpha / len(planned)
        self.point_margin = point_margin
        self.point = -math.log1p(delta)
        self.threshold = 0.0 if point_margin else self.point
        self.offset_ms = offset_ms
        self._cur: list[float] = []
        self._d: list[float] = []
        self._taken: list[Look] = []
        self._decision: Decision = "continue"

    @property
    def pairs(self) -> int:
        """Pairs added so far."""
        return len(self._d)

    def add(self, t_cur: float, t_cand: float) -> Decision:
        """Add one pair (ms); take a look if this completes a planned one; return the decision.

        Raises ``ValueError`` on a non-finite or non-positive timing, or when a terminal
        decision was already reached (more pairs would not be looked at).
        """
        if self._decision != "continue":
            raise ValueError(f"decision already reached ({self._decision}); no more pairs needed")
        problem = pair_problem([t_cur], [t_cand])
        if problem is not None:
            raise ValueError(problem)
        self._d.append(math.log(t_cand / t_cur))
        self._cur.append(t_cur)
        if len(self._d) in self.looks:
            self._look(last=len(self._d) == self.looks[-1])
        return self._decision

    def decision(self) -> Decision:
        """The decision as of the latest look ("continue" between looks)."""
        return self._decision

    def finish(self) -> Decision:
        """Close the test with the data at hand: a final look if one is still owed.

        Returns "accept" or "reject"; with no pairs at all it is "reject".
        """
        if self._decision == "continue":
            if not self._d:
                self._decision = "reject"
            else:
                self._look(last=True)
        return self._decision

    def result(self) -> SignTestResult:
        """Every number behind the current decision."""
        return SignTestResult(
            decision=self._decision,
            accepted=self._decision == "accept",
            reason=self._reason(),
            delta=self.delta,
            alpha=self.alpha,
            alpha_per_look=self.alpha_per_look,
            threshold=self.threshold,
            looks_planned=list(self.looks),
            pairs=len(self._d),
            looks_taken=list(self._taken),
            offset_ms=self.offset_ms,
        )

    def _look(self, *, last: bool) -> None:
        d = sorted(self._d)
        n = len(d)
        k = sign_test_rank(n, self.alpha_per_look)
        upper = d[k - 1] if k is not None else None
        lower = d[n - k] if k is not None else None
        allow = allowance(self._cur, self.offset_ms)
        shift = math.log1p(allow)
        threshold = self.threshold - shift
        below = sum(1 for x in d if x < threshold)
        above = sum(1 for x in d if x > threshold)
        point_ok = not self.point_margin or statistics.median(d) <= self.point - shift
        if upper is not None and upper < threshold and point_ok:
            decision: Decision = "accept"
        elif last or (lower is not None and lower > threshold):
            decision = "reject"
        else:
            decision = "continue"
        self._taken.append(Look(
            pairs=n, alpha=self.alpha_per_look, rank=k, upper_bound=upper, lower_bound=lower,
            below_threshold=below, above_threshold=above,
            positives=sum(1 for x in d if x < 0), median_d=statistics.median(d),
            decision=decision, threshold=threshold, offset_allowance=allow,
        ))
        self._decision = decision

    def _reason(self) -> str:
        look = self._taken[-1] if self._taken else None
        if look is None:
            if self._decision == "reject":
                return "no pairs measured"
            return f"{len(self._d)} pairs; first look at {self.looks[0]}"
        head = f"look {len(self._taken)}/{len(self.looks)} at {look.pairs} pairs"
        thr = (f"threshold -ln(1+{self.delta}) = {self.threshold:.5f}" if not look.offset_allowance
               else f"threshold -ln(1+{self.delta}) - ln(1+{look.offset_allowance:.4f}) "
                    f"(offset allowance {self.offset_ms * 1e3:.3g} us) = {look.threshold:.5f}")
        if look.upper_bound is None:
            bound = (f"no upper bound at level alpha/looks = {self.alpha_per_look:.4g} "
                     f"with {look.pairs} pairs")
        else:
            bound = (f"upper bound on median ln(t_cand/t_cur) {look.upper_bound:.5f} "
                     f"(order statistic {look.rank}, alpha/look {self.alpha_per_look:.4g})")
        if self._decision == "accept":
            return f"{head}: {bound} < {thr}"
        if self._decision == "continue":
            return f"{head}: {bound} not < {thr}; continuing"
        if look.lower_bound is not None and look.lower_bound > look.threshold:
            return (f"{head}: futility: lower bound {look.lower_bound:.5f} > {thr} "
                    f"(median d {look.median_d:.5f})")
        return f"{head}: last look, {bound} not < {thr}"


def sequential_sign_test(
    t_cur: Sequence[float],
    t_cand: Sequence[float],
    *,
    delta: float = 0.01,
    alpha: float = 0.01,
    looks: Sequence[int] = DEFAULT_LOOKS,
    point_margin: bool = False,
    offset_ms: float = 0.0,
) -> SignTestResult:
    """The controlled rule on paired timings already measured; never raises on bad timings.

    Pairs are fed in order to a :class:`SequentialSignTest`; pairs past the decisive look
    are not used. When the data end between planned looks, a final look is taken at the
    pair count reached (see :meth:`SequentialSignTest.finish`).
    """
    test = SequentialSignTest(delta, alpha, looks, point_margin=point_margin, offset_ms=offset_ms)
    problem = pair_problem(t_cur, t_cand)
    if problem is not None:
        res = test.result()
        res.decision, res.accepted, res.reason = "reject", False, problem
        return res
    for c, k in zip(t_cur, t_cand, strict=True):
        if test.add(c, k) != "continue":
            break
    test.finish()
    return test.result()
