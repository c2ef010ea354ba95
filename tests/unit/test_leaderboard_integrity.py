"""A submission with an integrity violation on any task is disqualified as a whole."""

from __future__ import annotations

import pytest

from grader.leaderboard.aggregate import board
from grader.leaderboard.integrity import violation
from grader.leaderboard.job import classify
from grader.leaderboard.state import EvalRow
from grader.report.model import Report, ReportError

SHA = "f" * 64


def _report(stage: str, code: str, origin: str = "candidate", message: str = "m") -> Report:
    return Report(ok=False, stage=stage,  # type: ignore[arg-type]
                  errors=[ReportError(stage=stage, code=code, origin=origin,  # type: ignore[arg-type]
                                      message=message)])


def test_torch_compute_denied_by_the_allow_list_is_a_library_fallback_not_an_attack() -> None:
    msg = "torch.add is not on policy triton-only's allow-list for torch (...)"
    assert violation(_report("scan", "name-not-allowed", message=msg)) is None
    assert violation(_report("scan", "name-not-allowed",
                             message="os.system is not on policy triton-only's allow-list")) is not None


@pytest.mark.parametrize(("stage", "code"), [
    ("correctness", "out_of_bounds_write"), ("benchmark", "work_escaped_timing"),
    ("integrity", "judge_died"), ("integrity", "result_forged"), ("compile", "pids_limit"),
    ("compile", "torch_compute_in_launch"), ("scan", "dynamic-attribute"),
    ("scan", "process-exit"), ("scan", "some-new-security-rule"),
])
def test_violations_disqualify(stage: str, code: str) -> None:
    assert violation(_report(stage, code)) is not None
    assert classify(_report(stage, code))[0] == "disqualified"


@pytest.mark.parametrize(("stage", "code", "origin"), [
    ("correctness", "wrong_values", "candidate"), ("compile", "import", "candidate"),
    ("benchmark", "timeout", "candidate"), ("compile", "memory_limit", "candidate"),
    ("scan", "syntax-error", "candidate"), ("scan", "require-triton-kernel", "candidate"),
    ("sandbox", "judge_error", "infrastructure"),
    ("accept", "current_work_escaped_timing", "candidate"),  # the current best's fault
])
def test_honest_failures_lose_only_their_task(stage: str, code: str, origin: str) -> None:
    assert violation(_report(stage, code, origin)) is None
    assert classify(_report(stage, code, origin))[0] != "disqualified"


def _row(sub: str, task: str, verdict: str, s: float | None, code: str | None = None) -> EvalRow:
    return EvalRow(submission=sub, task=task, file_sha=SHA, round="main", verdict=verdict,
                   stage=None, code=code, message="why", speedup=s, speedup_source="pairs",
                   t_sub_ms=None, report_json=None, wall_s=0.0, engine="local")


def test_board_lists_disqualified_submissions_apart_and_ranks_them_nowhere() -> None:
    rows = [_row("honest", "a", "ok", 1.5), _row("honest", "b", "ok", 1.2),
            _row("cheat", "a", "ok", 9.0), _row("cheat", "b", "disqualified", None,
                                                 "out_of_bounds_write")]
    subs = {"honest": {"a": SHA, "b": SHA}, "cheat": {"a": SHA, "b": SHA}}
    b = board(rows, subs, ["a", "b"], [])
    assert [e.submission for e in b.unranked] == ["honest"]
    assert [(d.submission, d.task, d.code) for d in b.disqualified] == [
        ("cheat", "b", "out_of_bounds_write")]
