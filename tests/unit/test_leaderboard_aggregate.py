"""Leaderboard aggregates: labelled statistics, unsolved handling, ranking from re-runs."""

from __future__ import annotations

import json
import math

import pytest

from grader.leaderboard.aggregate import (
    TaskFigure,
    board,
    infra_key,
    median_ci,
    row_times,
    select_top,
    summarize,
)
from grader.leaderboard.state import EvalRow

SHA = "f" * 64


def fig(task: str, verdict: str, s: float | None) -> TaskFigure:
    return TaskFigure(task, verdict, s)


def row(sub: str, task: str, rnd: str, verdict: str, s: float | None) -> EvalRow:
    return EvalRow(submission=sub, task=task, file_sha=SHA, round=rnd, verdict=verdict,
                   stage=None, code=None, message="", speedup=s, speedup_source="pairs",
                   t_sub_ms=None, report_json=None, wall_s=0.0, engine="local")


def test_statistics_follow_their_labelled_definitions() -> None:
    st = summarize([fig("a", "ok", 2.0), fig("b", "ok", 0.5), fig("c", "failed", None),
                    fig("d", "ok", 4.0)])
    assert st["geomean"].value == pytest.approx((2.0 * 0.5 * 4.0) ** (1 / 3))
    assert st["geomean"].n == 3 and "3/4" in st["geomean"].label
    assert st["median"].value == pytest.approx(1.25)  # of 0, 0.5, 2, 4
    assert st["fast_0"].value == 0.75
    assert st["fast_1"].value == 0.5
    assert st["fast_1_5"].value == 0.5
    assert st["fast_2"].value == 0.25  # strictly greater than 2
    assert st["floored_geomean"].value == pytest.approx((2.0 * 1 * 1 * 4.0) ** 0.25)
    for s in st.values():
        assert s.low is not None and s.high is not None and s.low <= s.value <= s.high  # type: ignore[operator]


def test_anomaly_is_never_a_record() -> None:
    st = summarize([fig("a", "anomaly", 1000.0), fig("b", "ok", 1.0)])
    assert st["fast_2"].value == 0.0
    assert st["geomean"].value == pytest.approx(1.0)


def test_intervals_are_reproducible() -> None:
    figs = [fig(str(i), "ok", 1.0 + i / 3) for i in range(6)]
    assert summarize(figs)["geomean"] == summarize(figs)["geomean"]


def test_nothing_solved_gives_no_geomean_but_zero_fast_p() -> None:
    st = summarize([fig("a", "failed", None), fig("b", "not_entered", None)])
    assert st["geomean"].value is None
    assert st["fast_0"].value == 0.0
    assert st["floored_geomean"].value == pytest.approx(1.0)


def test_published_ranking_uses_rerun_figures_not_selection_figures() -> None:
    files = {"lucky": {"t": SHA}, "steady": {"t": SHA}, "bad": {"t": SHA}}
    rows = [row("lucky", "t", "main", "ok", 5.0), row("steady", "t", "main", "ok", 3.0),
            row("bad", "t", "main", "failed", None),
            row("lucky", "t", "rerun", "ok", 1.1), row("steady", "t", "rerun", "ok", 2.9)]
    top = select_top(rows, files, ["t"], 2)
    assert top == ["lucky", "steady"]
    b = board(rows, files, ["t"], top)
    assert [(e.submission, e.rank, e.round) for e in b.ranked] == [
        ("steady", 1, "rerun"), ("lucky", 2, "rerun")]
    assert b.ranked[1].figures["t"].speedup == 1.1
    assert [e.submission for e in b.unranked] == ["bad"]


def test_not_entered_task_counts_as_unsolved_and_a_pending_task_is_listed_with_its_reason() -> None:
    files = {"part": {"t1": SHA}, "pending": {"t1": SHA, "t2": SHA}}
    rows = [row("part", "t1", "main", "ok", 4.0), row("pending", "t1", "main", "ok", 4.0)]
    infra = {infra_key("pending", "t2", "main"): "sandbox_unavailable: bwrap missing"}
    b = board(rows, files, ["t1", "t2"], [], infra)
    assert [e.submission for e in b.unranked] == ["part"]
    e = b.unranked[0]
    assert e.figures["t2"].verdict == "not_entered"
    assert e.stats["fast_1"].value == 0.5
    assert math.isclose(e.stats["floored_geomean"].value or 0, 2.0)
    # Not ranked (its round is incomplete), but never dropped: listed with the reason.
    assert [(p.submission, p.task, p.round, p.reason) for p in b.pending] == [
        ("pending", "t2", "main", "sandbox_unavailable: bwrap missing")]


def test_a_selected_entry_whose_rerun_is_missing_is_pending_not_vanished() -> None:
    files = {"a": {"t": SHA}, "b": {"t": SHA}}
    rows = [row("a", "t", "main", "ok", 2.0), row("b", "t", "main", "ok", 1.5),
            row("a", "t", "rerun", "ok", 1.9)]
    b = board(rows, files, ["t"], ["a", "b"])
    assert [e.submission for e in b.ranked] == ["a"] and b.top == ["a", "b"]
    assert [e.submission for e in b.unranked] == ["b"]  # its main figures, unranked
    assert [(p.submission, p.round, p.reason) for p in b.pending] == [
        ("b", "rerun", "not evaluated yet")]


def test_all_slower_than_reference_is_ordered_by_the_real_geomean() -> None:
    files = {"x": {"t1": SHA, "t2": SHA}, "y": {"t1": SHA, "t2": SHA}}
    rows = [row("x", "t1", "main", "ok", 0.5), row("x", "t2", "main", "ok", 0.4),
            row("y", "t1", "main", "ok", 0.9), row("y", "t2", "main", "ok", 0.8)]
    b = board(rows, files, ["t1", "t2"], [])
    assert b.none_faster
    assert [e.submission for e in b.unranked] == ["y", "x"]
    gm = b.unranked[0].stats["geomean"]
    assert gm.value == pytest.approx((0.9 * 0.8) ** 0.5) and gm.low != gm.high
    assert b.unranked[0].stats["floored_geomean"].value == 1.0
    assert b.unranked[0].correct_count == 2


def test_median_interval_is_the_order_statistics_of_the_sign_test() -> None:
    ci = median_ci([float(x) for x in range(100, 0, -1)])
    assert ci is not None and ci.value == 50.5 and (ci.low, ci.high) == (40.0, 61.0)
    small = median_ci([3.0, 1.0, 2.0, 4.0, 5.0])  # 5 samples bound nothing at 95%
    assert small is not None and small.value == 3.0 and small.low is None and small.n == 5
    assert median_ci([]) is None


def test_row_times_read_both_sides_of_the_report() -> None:
    rep = {"timing": {"median_ms": 2.0, "samples": 30,
                      "clocks": {"samples_ms": [2.0 + i / 100 for i in range(30)]}},
           "timing_current": {"median_ms": 3.0, "samples": 4}}
    sub, ref = row_times(json.dumps(rep))
    assert sub is not None and sub.value == 2.0 and sub.n == 30
    assert sub.low is not None and sub.high is not None and sub.low <= 2.15 <= sub.high
    assert ref is not None and ref.value == 3.0 and ref.low is None and ref.n == 4
    assert row_times(None) == (None, None) and row_times("not json") == (None, None)
    # A leaderboard evaluation times the reference only in the pairs: the seed rule's median.
    paired = {"timing": rep["timing"], "acceptance": {"rules": [
        {"rule": "controlled", "numbers": {"pairs": 25}},
        {"rule": "seed", "numbers": {"pairs": 25, "median_current_ms": 0.2}}]}}
    _, ref = row_times(json.dumps(paired))
    assert ref is not None and ref.value == 0.2 and ref.n == 25 and ref.low is None
    assert "25 interleaved pairs" in ref.note


def test_a_pair_speedup_at_the_cpu_clock_floor_is_unmeasured_not_published() -> None:
    """A reference timed at the judge clock's 1e-6 ms floor once gave a 6.7e-9 speed-up."""
    rep = {"acceptance": {"rules": [{"rule": "seed", "numbers": {
        "pairs": 25, "median_current_ms": 1e-06, "median_candidate_ms": 207.2}}]}}
    r = row("a", "t", "main", "ok", 6.7e-9)
    r = EvalRow(**{**r.__dict__, "report_json": json.dumps(rep)})
    b = board([r], {"a": {"t": SHA}}, ["t"], [])
    f = b.unranked[0].figures["t"]
    assert f.correct and not f.solved and f.speedup is None and f.code == "speedup_unmeasured"
    assert "clock's floor" in f.message and b.unranked[0].stats["geomean"].value is None
