"""Leaderboard aggregates: labelled statistics, unsolved handling, ranking from re-runs."""

from __future__ import annotations

import math

import pytest

from grader.leaderboard.aggregate import TaskFigure, board, select_top, summarize
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


def test_not_entered_task_counts_as_unsolved_and_pending_task_hides_the_entry() -> None:
    files = {"part": {"t1": SHA}, "pending": {"t1": SHA, "t2": SHA}}
    rows = [row("part", "t1", "main", "ok", 4.0), row("pending", "t1", "main", "ok", 4.0)]
    b = board(rows, files, ["t1", "t2"], [])
    assert [e.submission for e in b.unranked] == ["part"]
    e = b.unranked[0]
    assert e.figures["t2"].verdict == "not_entered"
    assert e.stats["fast_1"].value == 0.5
    assert math.isclose(e.stats["floored_geomean"].value or 0, 2.0)
