"""Whose time ran out when a stage overran its budget (sandbox.judge.clock): pure logic."""

from __future__ import annotations

from sandbox.judge.clock import overrun


def test_a_stage_within_its_budget_is_not_an_overrun() -> None:
    assert overrun("correctness", t0=0.0, deadline=120.0, now=119.0, answer_s=118.0) is None


def test_a_stage_spent_in_the_candidates_own_calls_is_the_candidates_timeout() -> None:
    f = overrun("benchmark", t0=0.0, deadline=120.0, now=121.0, answer_s=100.0)
    assert f is not None and f.error.code == "timeout" and f.error.origin == "candidate"
    assert f.error.stage == "benchmark" and "100.0 s of 121.0 s" in f.error.message


def test_a_stage_spent_around_fast_calls_is_the_harnesss_and_retried() -> None:
    f = overrun("accept", t0=10.0, deadline=130.0, now=131.0, answer_s=3.0)
    assert f is not None and f.error.code == "harness_timeout"
    assert f.error.origin == "infrastructure" and f.error.detail["candidate_answers_s"] == 3.0
