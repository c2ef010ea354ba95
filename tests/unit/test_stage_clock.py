"""Whose time ran out when a stage overran its budget (sandbox.judge.clock): pure logic."""

from __future__ import annotations

from sandbox.judge.clock import overrun


def test_a_stage_within_its_budget_is_not_an_overrun() -> None:
    assert overrun("correctness", t0=0.0, deadline=120.0, now=119.0,
                   answers={"candidate": 118.0}) is None


def test_a_stage_spent_in_the_candidates_own_calls_is_the_candidates_timeout() -> None:
    f = overrun("benchmark", t0=0.0, deadline=120.0, now=121.0,
                answers={"candidate": 100.0})
    assert f is not None and f.error.code == "timeout" and f.error.origin == "candidate"
    assert f.error.stage == "benchmark" and "100.0 s of 121.0 s" in f.error.message
    assert f.error.detail["overrun_by"] == "candidate"


def test_a_stage_spent_around_fast_calls_is_the_harnesss_and_retried() -> None:
    f = overrun("accept", t0=10.0, deadline=130.0, now=131.0,
                answers={"candidate": 3.0})
    assert f is not None and f.error.code == "harness_timeout"
    assert f.error.origin == "infrastructure" and f.error.detail["candidate_answers_s"] == 3.0


def test_in_the_acceptance_stage_each_side_is_counted_on_its_own() -> None:
    f = overrun("accept", t0=0.0, deadline=300.0, now=301.0,
                answers={"candidate": 40.0, "current": 200.0})
    assert f is not None and f.error.code == "timeout" and f.error.detail["overrun_by"] == "current"
    assert "the current best's own calls took 200.0 s of 301.0 s" in f.error.message


def test_two_sides_under_half_each_are_not_blamed_together() -> None:
    # before, their sum (260 s) was "the candidate's own calls"
    f = overrun("accept", t0=0.0, deadline=300.0, now=301.0,
                answers={"candidate": 130.0, "current": 130.0})
    assert f is not None and f.error.code == "harness_timeout"
    assert f.error.origin == "infrastructure" and f.error.detail["overrun_by"] == "harness"
    assert "the candidate's calls took 130.0 s and the current best's calls took 130.0 s" \
        in f.error.message


def test_a_stage_with_no_answer_yet_is_the_harnesss() -> None:
    f = overrun("correctness", t0=0.0, deadline=10.0, now=11.0, answers={})
    assert f is not None and f.error.code == "harness_timeout"


def test_only_the_stage_clocks_own_codes_move_the_blame_to_another_side() -> None:
    from sandbox.contract.failure import StageFailure
    from sandbox.judge.acceptance import blamed

    late = overrun("accept", t0=0.0, deadline=10.0, now=11.0, answers={"candidate": 9.0})
    assert late is not None and blamed(late, by_current=True).error.code == "timeout"
    other = StageFailure("accept", "wrong_values", "x", detail={"overrun_by": "current"})
    assert blamed(other, by_current=False).error.code == "wrong_values"
    assert blamed(other, by_current=True).error.code == "current_wrong_values"
