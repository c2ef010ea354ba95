"""grader/measure/accept.py: the acceptance decision and the leaderboard aggregates."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.measure.accept import (
    bootstrap_ci,
    decide,
    fast_p,
    floored_geomean,
    geomean,
)
from grader.report.model import AcceptanceResult
from grader.task import AcceptanceSpec

SEED = AcceptanceSpec()
CONTROLLED = AcceptanceSpec(rule="controlled", alpha=0.01, min_improvement_fraction=0.02)


def _noisy(seed: int, n: int, ratio: float, noise: float = 0.02) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    cur = [math.exp(rng.gauss(0, noise)) for _ in range(n)]
    cand = [ratio * math.exp(rng.gauss(0, noise)) for _ in range(n)]
    return cur, cand


# --- decide ---------------------------------------------------------------------------


def test_seed_rule_decides_hand_computed_example_and_both_rules_are_reported() -> None:
    # r = [0.1, 0.1, 0.1, -0.1, 0.05]: median 0.1, 4/5 positive
    res = decide([10.0] * 5, [9.0, 9.0, 9.0, 11.0, 9.5], SEED)
    assert res.accepted and res.rule == "seed"
    assert res.improvement_fraction == pytest.approx(0.1)
    assert res.positive_fraction == pytest.approx(0.8)
    assert res.pairs == 5
    assert [r.rule for r in res.rules] == ["seed", "controlled", "gain"]
    seed, controlled, _gain = res.rules
    assert seed.accepted and seed.numbers["median_r"] == pytest.approx(0.1)
    # five pairs are too few for a sign-test bound at alpha / 4
    assert not controlled.accepted and "no upper bound" in controlled.reason
    assert res.reason.startswith("seed rule: ")


def test_controlled_rule_decides_when_the_task_names_it() -> None:
    res = decide([10.0] * 5, [9.0] * 5, AcceptanceSpec(rule="controlled"))
    assert res.rule == "controlled"
    assert not res.accepted  # the seed rule alone would accept
    assert res.rules[0].accepted
    assert res.reason.startswith("controlled rule: ")


def test_controlled_rule_accepts_a_clear_gain_and_reports_its_numbers() -> None:
    cur, cand = _noisy(1, 200, 0.8)
    res = decide(cur, cand, CONTROLLED)
    assert res.accepted
    nums = res.rules[1].numbers
    assert nums["looks"] == 1 and nums["pairs_used"] == 25
    assert nums["upper_bound"] < nums["threshold"] == pytest.approx(-math.log(1.02))
    assert nums["alpha_per_look"] == pytest.approx(0.0025)
    assert nums["positives"] == 25
    assert nums["looks_planned"] == [25, 50, 100, 200]
    assert nums["median_d"] == pytest.approx(math.log(0.8), abs=0.02)
    # improvement_fraction is the seed rule's median r over every pair given
    assert res.improvement_fraction == pytest.approx(0.2, abs=0.02)
    assert res.pairs == 200


def test_controlled_rule_rejects_identical_kernels_for_futility() -> None:
    cur, cand = _noisy(2, 200, 1.0)
    res = decide(cur, cand, CONTROLLED)
    assert not res.accepted
    assert "futility" in res.reason


def test_min_pairs_applies_to_the_controlled_rule_too() -> None:
    spec = AcceptanceSpec(rule="controlled", min_pairs=40, alpha=0.2, looks=[10, 40])
    res = decide([1.0] * 10, [0.5] * 10, spec)
    assert not res.accepted
    assert "10 pairs < min_pairs 40" in res.reason


def test_too_few_pairs_is_not_accepted_and_says_so() -> None:
    res = decide([10.0] * 3, [5.0] * 3, SEED)
    assert not res.accepted
    assert "3 pairs < min_pairs 5" in res.reason


@pytest.mark.parametrize(
    ("cur", "cand", "words"),
    [
        ([], [], "0 pairs < min_pairs"),
        ([1.0] * 6, [1.0] * 5, "unpaired"),
        ([1.0] * 6, [0.5, 0.5, float("nan"), 0.5, 0.5, 0.5], "candidate timing #2"),
        ([1.0, 1.0, 0.0, 1.0, 1.0, 1.0], [0.5] * 6, "current timing #2"),
        ([1.0] * 6, [0.5, -0.5, 0.5, 0.5, 0.5, 0.5], "finite and positive"),
        ([1.0] * 6, [float("inf")] * 6, "finite and positive"),
    ],
)
def test_broken_timings_are_rejected_with_reason_never_raised(
    cur: list[float], cand: list[float], words: str
) -> None:
    for spec in (SEED, CONTROLLED):
        res = decide(cur, cand, spec)
        assert not res.accepted
        assert words in res.reason
        assert not any(r.accepted for r in res.rules)


def test_unmeasurable_improvement_is_null_with_a_reason() -> None:
    res = decide([1.0] * 6, [float("nan")] * 6, SEED)
    assert res.improvement_fraction is None and res.positive_fraction is None
    assert "finite and positive" in res.unmeasured["improvement_fraction"]


def test_result_round_trips_through_json() -> None:
    # a missing bound must be null, not Infinity, in the report
    res = decide([10.0] * 5, [9.0] * 5, SEED)
    text = res.model_dump_json()
    assert "Infinity" not in text and "NaN" not in text
    assert AcceptanceResult.model_validate_json(text) == res
    json.loads(text)


timing = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=1e-3, max_value=1e3),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(timing, timing), max_size=40), st.sampled_from([SEED, CONTROLLED]))
def test_decide_never_raises_and_is_never_accepted_on_broken_input(
    pairs: list[tuple[float, float]], spec: AcceptanceSpec
) -> None:
    cur = [c for c, _ in pairs]
    cand = [k for _, k in pairs]
    res = decide(cur, cand, spec)
    broken = len(pairs) < spec.min_pairs or not all(
        math.isfinite(t) and t > 0 for t in cur + cand
    )
    if broken:
        assert not res.accepted
    AcceptanceResult.model_validate_json(res.model_dump_json())


# --- aggregates -------------------------------------------------------------------------


def test_geomean_hand_examples() -> None:
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert geomean([2.0, 8.0, 4.0]) == pytest.approx(4.0)


def test_geomean_is_computed_in_log_space_without_overflow() -> None:
    assert geomean([1e300] * 10) == pytest.approx(1e300)
    assert geomean([1e-300] * 10) == pytest.approx(1e-300)


@pytest.mark.parametrize("bad", [[], [1.0, 0.0], [2.0, -1.0], [float("nan")], [float("inf")]])
def test_geomean_refuses_values_it_cannot_average(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        geomean(bad)


def test_fast_p_counts_correct_tasks_faster_than_p_over_all_tasks() -> None:
    speedups = [0.5, 1.5, 2.0, 3.0]
    correct = [True, True, False, True]
    assert fast_p(speedups, correct, 1.0) == 0.5  # 1.5 and 3.0; 2.0 is incorrect
    assert fast_p(speedups, correct, 0.0) == 0.75
    assert fast_p(speedups, correct, 3.0) == 0.0  # strictly greater than p
    with pytest.raises(ValueError):
        fast_p([1.0], [True, False], 1.0)


def test_floored_geomean_clips_each_speedup_below_at_the_floor() -> None:
    assert floored_geomean([0.25, 4.0]) == pytest.approx(2.0)  # sqrt(1 * 4)
    assert floored_geomean([0.25, 4.0], floor=0.5) == pytest.approx(math.sqrt(2.0))
    assert floored_geomean([0.25, 4.0], correct=[True, False]) == pytest.approx(1.0)
    assert floored_geomean([0.1, 0.2]) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        floored_geomean([1.0], floor=0.0)


def test_bootstrap_ci_is_reproducible_and_brackets_the_statistic() -> None:
    rng = random.Random(0)
    values = [math.exp(rng.gauss(0.2, 0.3)) for _ in range(40)]
    a = bootstrap_ci(values, seed=7)
    assert a == bootstrap_ci(values, seed=7)
    assert a != bootstrap_ci(values, seed=8)
    lo, hi = a
    assert lo < geomean(values) < hi
    lo90, hi90 = bootstrap_ci(values, seed=7, confidence=0.90)
    assert lo <= lo90 and hi90 <= hi


def test_bootstrap_ci_of_constant_values_is_a_point() -> None:
    assert bootstrap_ci([2.0] * 10, resamples=50) == pytest.approx((2.0, 2.0))


def test_bootstrap_ci_accepts_any_statistic() -> None:
    lo, hi = bootstrap_ci([1.0, 2.0, 3.0, 4.0], stat=lambda v: sum(v) / len(v), resamples=500)
    assert 1.0 <= lo <= 2.5 <= hi <= 4.0
