"""A runner pair's offset allowance (sandbox/contract/rules.py): A/A pairs carrying a pair's
own offset are not accepted at ~5 us; real gains still are; long kernels are unaffected."""

from __future__ import annotations

import random
import statistics

import pytest

from grader.measure.accept import decide, decide_with_replicate
from grader.task import AcceptanceSpec
from sandbox.contract import rules, wire


def _pairs(t_us: float, gain: float, offset_us: float, n: int = 100, noise: float = 0.002,
           seed: int = 1) -> tuple[list[float], list[float]]:
    """(t_cur, t_cand) in ms: the candidate ``gain`` faster, plus a constant ``offset_us``
    in the candidate runner's favour, with relative noise per call."""
    rng = random.Random(seed)
    cur = [t_us * (1 + rng.gauss(0, noise)) / 1e3 for _ in range(n)]
    cand = [(t_us * (1 - gain) - offset_us) * (1 + rng.gauss(0, noise)) / 1e3 for _ in range(n)]
    return cur, cand


@pytest.mark.parametrize("rule", ["seed", "controlled", "gain"])
def test_an_offset_of_the_pair_is_not_a_gain_at_5_us(rule: str) -> None:
    cur, cand = _pairs(5.0, 0.0, 0.15)  # 3% of a 5 us kernel, as seen on an H200
    kw = dict(rule=rule, min_pairs=5, min_improvement_fraction=0.01, min_positive_fraction=0.6,
              alpha=0.01, looks=(25, 50, 100))
    assert rules.rule_accepts(cur, cand, **kw)  # type: ignore[arg-type]  # the bias, unguarded
    assert not rules.rule_accepts(cur, cand, offset_ms=0.25e-3, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("rule", ["seed", "controlled", "gain"])
def test_a_real_gain_at_5_us_is_still_accepted(rule: str) -> None:
    cur, cand = _pairs(5.0, 0.15, 0.1)
    assert rules.rule_accepts(cur, cand, rule=rule, min_pairs=5, min_improvement_fraction=0.01,
                              min_positive_fraction=0.6, alpha=0.01, looks=(25, 50, 100),
                              offset_ms=0.25e-3)


def test_at_1_ms_the_allowance_is_a_fortieth_of_a_percent() -> None:
    cur, cand = _pairs(1000.0, 0.02, 0.0, noise=0.001)
    res = rules.sequential_sign_test(cur, cand, delta=0.01, alpha=0.01, looks=(25, 50, 100),
                                     offset_ms=0.25e-3)
    assert res.accepted
    look = res.looks_taken[-1]
    assert look.offset_allowance == pytest.approx(0.25e-3 / statistics.median(cur[:look.pairs]))
    assert look.threshold < res.threshold  # the moved threshold, recorded per look
    assert "offset allowance 0.25 us" in res.reason


def test_the_host_and_the_judge_apply_the_same_allowance() -> None:
    spec = AcceptanceSpec(rule="controlled", looks=[25, 50, 100])
    assert spec.pair_offset_us == 0.25 and spec.to_wire().pair_offset_us == 0.25
    cur, cand = _pairs(5.0, 0.0, 0.15)
    acc = spec.to_wire()
    judge = rules.rule_accepts(cur, cand, rule=acc.rule, min_pairs=acc.min_pairs,
                               min_improvement_fraction=acc.min_improvement_fraction,
                               min_positive_fraction=acc.min_positive_fraction, alpha=acc.alpha,
                               looks=acc.looks, offset_ms=acc.pair_offset_us / 1e3)
    assert judge is decide(cur, cand, spec).accepted is False
    off = AcceptanceSpec(rule="controlled", looks=[25, 50, 100], pair_offset_us=0)
    assert decide(cur, cand, off).accepted


def test_the_replicate_needs_the_margin_and_the_allowance() -> None:
    spec = AcceptanceSpec(rule="controlled", looks=[25, 50, 100])
    cur, cand = _pairs(5.0, 0.15, 0.0)
    rep_cur, rep_cand = _pairs(5.0, 0.0, 0.15, seed=2)  # the replicate: only a pair's offset
    rec = wire.AcceptanceRecord(deciding=wire.PairsRecord(t_cur=tuple(cur), t_cand=tuple(cand)),
                                replicate=wire.PairsRecord(t_cur=tuple(rep_cur), t_cand=tuple(rep_cand)))
    res = decide_with_replicate(rec, spec)
    assert not res.accepted and "not confirmed" in res.reason


def test_a_bad_offset_is_refused() -> None:
    with pytest.raises(ValueError):
        rules.SequentialSignTest(0.01, 0.01, offset_ms=float("nan"))
