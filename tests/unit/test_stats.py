"""sandbox/contract/stats.py (summaries) and sandbox/contract/rules.py (the seed rule, the sequential sign test)."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.contract.rules import (
    SequentialSignTest,
    seed_rule,
    sequential_sign_test,
    sign_test_rank,
)
from sandbox.contract.stats import percentile, summarize

# --- summarize --------------------------------------------------------------------------


def test_summarize_matches_hand_computed_values() -> None:
    s = summarize([3.0, 1.0, 5.0, 2.0, 4.0])
    assert s["n"] == 5
    assert s["mean"] == 3.0
    assert s["median"] == 3.0
    assert s["min"] == 1.0
    # p95 by linear interpolation: position 0.95 * 4 = 3.8 -> 4 + 0.8 * (5 - 4)
    assert s["p95"] == pytest.approx(4.8)
    # sample std: sum of squares 10 over n - 1 = 4
    assert s["std"] == pytest.approx(math.sqrt(2.5))
    assert s["cv"] == pytest.approx(math.sqrt(2.5) / 3.0)


def test_summarize_of_one_sample_has_zero_spread() -> None:
    s = summarize([2.5])
    assert (s["mean"], s["median"], s["p95"], s["std"], s["min"], s["cv"], s["n"]) == (
        2.5, 2.5, 2.5, 0.0, 2.5, 0.0, 1,
    )


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_summarize_refuses_empty_or_non_finite_samples(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        summarize(bad)


def test_percentile_interpolates_linearly() -> None:
    vals = [10.0, 20.0, 30.0, 40.0]
    assert percentile(vals, 0.0) == 10.0
    assert percentile(vals, 0.5) == 25.0
    assert percentile(vals, 0.95) == pytest.approx(38.5)
    assert percentile(vals, 1.0) == 40.0


@given(
    st.lists(st.floats(min_value=1e-6, max_value=1e6, allow_nan=False), min_size=1, max_size=60),
    st.randoms(use_true_random=False),
)
def test_summary_does_not_depend_on_sample_order(samples: list[float], rnd: random.Random) -> None:
    shuffled = list(samples)
    rnd.shuffle(shuffled)
    a, b = summarize(samples), summarize(shuffled)
    for key in ("mean", "median", "p95", "min", "n"):
        assert a[key] == b[key]
    assert a["std"] == pytest.approx(b["std"], rel=1e-9, abs=1e-12)


@given(st.lists(st.floats(min_value=1e-3, max_value=1e3), min_size=2, max_size=40))
def test_summary_statistics_are_ordered(samples: list[float]) -> None:
    s = summarize(samples)
    assert s["min"] <= s["median"] <= s["p95"] <= max(samples)
    assert s["min"] <= s["mean"] * (1 + 1e-12)
    assert s["std"] >= 0


# --- the seed rule --------------------------------------------------------------------


def test_seed_rule_accepts_hand_computed_example() -> None:
    # r = [0.1, 0.1, 0.1, -0.1, 0.05]: median 0.1, 4/5 positive
    res = seed_rule([10.0] * 5, [9.0, 9.0, 9.0, 11.0, 9.5])
    assert res.accepted
    assert res.median_r == pytest.approx(0.1)
    assert res.positives == 4
    assert res.positive_fraction == pytest.approx(0.8)
    assert res.pairs == 5


def test_seed_rule_names_too_few_pairs() -> None:
    res = seed_rule([10.0] * 4, [5.0] * 4)
    assert not res.accepted
    assert "4 pairs < min_pairs 5" in res.reason


def test_seed_rule_names_small_median_improvement() -> None:
    # r = 0.005 everywhere: all positive, but below 1 %
    res = seed_rule([10.0] * 6, [9.95] * 6)
    assert not res.accepted
    assert "median improvement 0.0050 < min_improvement_fraction 0.01" in res.reason


def test_seed_rule_names_too_few_positive_pairs() -> None:
    # r = [0.1, 0.1, 0.1, -0.1, -0.1]: median 0.1 passes, 3/5 = 0.6 < 0.8 fails
    res = seed_rule([10.0] * 5, [9.0, 9.0, 9.0, 11.0, 11.0], min_positive_fraction=0.8)
    assert not res.accepted
    assert "3/5 = 0.600 < min_positive_fraction 0.8" in res.reason


@pytest.mark.parametrize(
    ("cur", "cand", "words"),
    [
        ([1.0, 1.0], [1.0], "unpaired"),
        ([1.0] * 5, [1.0, 1.0, float("nan"), 1.0, 1.0], "candidate timing #2"),
        ([1.0, 0.0, 1.0, 1.0, 1.0], [1.0] * 5, "current timing #1"),
        ([1.0] * 5, [1.0, -1.0, 1.0, 1.0, 1.0], "finite and positive"),
        ([float("inf")] * 5, [1.0] * 5, "finite and positive"),
    ],
)
def test_seed_rule_rejects_broken_timings_without_raising(
    cur: list[float], cand: list[float], words: str
) -> None:
    res = seed_rule(cur, cand)
    assert not res.accepted
    assert words in res.reason


# --- sign-test critical ranks ------------------------------------------------------------


def _upper_tail(n: int, k: int) -> Fraction:
    return Fraction(sum(math.comb(n, i) for i in range(k, n + 1)), 2**n)


@pytest.mark.parametrize(
    ("n", "alpha", "k"),
    [
        (5, 0.05, 5),  # P(>=5) = 1/32 <= .05 < P(>=4) = 6/32
        (10, 0.05, 9),  # P(>=9) = 11/1024 <= .05 < P(>=8) = 56/1024
        (4, 0.05, None),  # even all four below gives 1/16 > .05
        (25, 0.0025, 20),  # P(>=20) = 2.04e-3 <= .0025 < P(>=19) = 7.3e-3
        (0, 0.05, None),
    ],
)
def test_sign_test_rank_matches_hand_computed_binomial_tails(n: int, alpha: float, k: int | None) -> None:
    assert sign_test_rank(n, alpha) == k


@given(st.integers(1, 80), st.sampled_from([0.001, 0.0025, 0.01, 0.05, 0.2]))
def test_sign_test_rank_is_the_smallest_rank_within_alpha(n: int, alpha: float) -> None:
    k = sign_test_rank(n, alpha)
    if k is None:
        assert _upper_tail(n, n) > Fraction(alpha)
    else:
        assert _upper_tail(n, k) <= Fraction(alpha)
        assert _upper_tail(n, k - 1) > Fraction(alpha)


def test_sign_test_rank_handles_more_than_1023_pairs() -> None:
    # 2**n overflows a float beyond n = 1023; the rank must still come out
    k = sign_test_rank(2000, 0.01)
    assert k is not None and 1000 < k < 1100


# --- the sequential sign test ------------------------------------------------------------


def _pairs(rng: random.Random, n: int, ratio: float, noise: float) -> tuple[list[float], list[float]]:
    """n pairs: candidate's true time is ``ratio`` times the current's; lognormal noise."""
    cur = [math.exp(rng.gauss(0, noise)) for _ in range(n)]
    cand = [ratio * math.exp(rng.gauss(0, noise)) for _ in range(n)]
    return cur, cand


def test_decision_is_only_made_at_look_boundaries() -> None:
    test = SequentialSignTest(delta=0.01, alpha=0.01, looks=[25, 50])
    for _ in range(24):
        assert test.add(1.0, 0.5) == "continue"
    assert test.decision() == "continue"
    assert test.result().looks_taken == []
    assert test.add(1.0, 0.5) == "accept"
    res = test.result()
    assert res.accepted and res.pairs == 25 and len(res.looks_taken) == 1
    look = res.looks_taken[0]
    # alpha per look 0.005 at n = 25: P(>=20) = 2.04e-3 <= .005 < P(>=19) = 7.3e-3
    assert look.rank == 20 and look.alpha == pytest.approx(0.005)
    assert look.upper_bound == pytest.approx(math.log(0.5))
    assert look.below_threshold == 25 and look.positives == 25
    assert res.threshold == pytest.approx(-math.log(1.01))


def test_adding_after_a_terminal_decision_is_refused() -> None:
    # alpha per look 0.1: at n = 5 the rank is 5 (P(>=5) = 1/32), so bounds exist
    test = SequentialSignTest(delta=0.01, alpha=0.2, looks=[5, 10])
    for _ in range(5):
        test.add(1.0, 1.0)
    assert test.decision() == "reject"  # futility: lower bound 0 > -ln(1.01)
    with pytest.raises(ValueError, match="decision already reached"):
        test.add(1.0, 0.5)


def test_add_refuses_non_positive_timings() -> None:
    with pytest.raises(ValueError, match="finite and positive"):
        SequentialSignTest(0.01, 0.01).add(0.0, 1.0)


@pytest.mark.parametrize("looks", [[], [10, 10], [50, 25], [0, 5]])
def test_looks_must_be_positive_and_increasing(looks: list[int]) -> None:
    with pytest.raises(ValueError):
        SequentialSignTest(0.01, 0.01, looks)


def test_identical_kernels_stop_for_futility_at_the_first_look() -> None:
    rng = random.Random(3)
    cur, cand = _pairs(rng, 200, 1.0, 0.02)
    res = sequential_sign_test(cur, cand, delta=0.05, alpha=0.01)
    assert res.decision == "reject"
    assert res.pairs == 25 and len(res.looks_taken) == 1
    assert "futility" in res.reason


def test_strong_gain_is_accepted_at_the_first_look() -> None:
    rng = random.Random(4)
    cur, cand = _pairs(rng, 200, 0.8, 0.03)
    res = sequential_sign_test(cur, cand, delta=0.01, alpha=0.01)
    assert res.accepted and res.decision == "accept"
    assert res.pairs == 25
    assert res.looks_taken[-1].upper_bound is not None
    assert res.looks_taken[-1].upper_bound < res.threshold


def test_a_gain_near_the_threshold_needs_more_looks() -> None:
    rng = random.Random(5)
    cur, cand = _pairs(rng, 200, 1 / 1.03, 0.02)  # true gain 3 %, threshold 1 %
    res = sequential_sign_test(cur, cand, delta=0.01, alpha=0.01)
    assert res.accepted
    assert res.pairs > 25


def test_running_out_of_pairs_between_looks_takes_a_final_look() -> None:
    # half the pairs 10 % faster, half equal: neither bound clears the threshold
    cand = [0.9, 1.0] * 15
    res = sequential_sign_test([1.0] * 30, cand, delta=0.05, alpha=0.01)
    assert [lk.pairs for lk in res.looks_taken] == [25, 30]
    assert res.decision == "reject"
    assert "last look" in res.reason


def test_too_few_pairs_for_any_bound_is_rejected_with_the_reason() -> None:
    res = sequential_sign_test([1.0] * 5, [0.5] * 5, alpha=0.01)
    assert not res.accepted
    assert "no upper bound" in res.reason


def test_broken_timings_are_rejected_without_raising() -> None:
    res = sequential_sign_test([1.0, 2.0], [1.0, float("nan")])
    assert res.decision == "reject" and "candidate timing #1" in res.reason


def _false_accept_rate(seed: int, runs: int, ratio: float, noise: float, alpha: float,
                       quantum: float = 0.0) -> float:
    rng = random.Random(seed)
    accepts = 0
    for _ in range(runs):
        cur, cand = _pairs(rng, 200, ratio, noise)
        if quantum:  # a coarse clock makes ties
            cur = [max(quantum, round(t / quantum) * quantum) for t in cur]
            cand = [max(quantum, round(t / quantum) * quantum) for t in cand]
        accepts += sequential_sign_test(cur, cand, delta=0.02, alpha=alpha).accepted
    return accepts / runs


@settings(max_examples=8, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**32 - 1),
    noise=st.sampled_from([0.005, 0.02, 0.1]),
    quantum=st.sampled_from([0.0, 0.01]),
)
def test_aa_runs_are_falsely_accepted_at_most_alpha_of_the_time(
    seed: int, noise: float, quantum: float
) -> None:
    assert _false_accept_rate(seed, 300, 1.0, noise, alpha=0.05, quantum=quantum) <= 0.05


def test_gain_exactly_at_the_threshold_is_falsely_accepted_at_most_alpha() -> None:
    # the hardest null: true median improvement exactly delta (not above it)
    rate = _false_accept_rate(seed=11, runs=1500, ratio=1 / 1.02, noise=0.02, alpha=0.05)
    assert rate <= 0.05


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), noise=st.sampled_from([0.005, 0.02, 0.05]))
def test_a_strong_true_gain_is_accepted(seed: int, noise: float) -> None:
    cur, cand = _pairs(random.Random(seed), 200, 0.7, noise)
    assert sequential_sign_test(cur, cand, delta=0.02, alpha=0.01).accepted
