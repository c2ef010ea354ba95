"""A re-run that cannot separate entries ranks them as tied (never "no ranking"), and a
resumed run refuses to grade a state on another secret's seeds."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import grader.leaderboard.job as job_mod
from grader.errors import UsageError
from grader.leaderboard.aggregate import board
from grader.leaderboard.job import TIED, Job, run_job, tied_within_noise
from grader.leaderboard.render import render_site
from grader.leaderboard.runner import check_seeds
from grader.leaderboard.seeds import Secret, task_payload
from grader.leaderboard.state import EvalRow, State, SubmissionRow
from grader.report.model import CorrectnessResult, Report, ReportError

TASK = Path(__file__).resolve().parents[2] / "examples" / "vector_add_small"
SHA = "a" * 64


def _unreliable(passed: bool = True) -> Report:
    return Report(ok=False, stage="benchmark", task="vector_add_small",
                  correctness=CorrectnessResult(passed=passed, checks=4),
                  errors=[ReportError(stage="benchmark", code="timing_unreliable",
                                      origin="infrastructure", message="host too loaded")])


def _job(rnd: str) -> Job:
    payload = task_payload(TASK, Secret(b"s" * 32, "test"))
    return Job(submission="alice", task=payload, file_sha=SHA, round=rnd, source="x = 1\n")


def test_a_rerun_the_host_cannot_time_is_correct_and_tied_not_an_infrastructure_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_mod, "evaluate", lambda req: _unreliable())
    out = run_job(_job("rerun"))
    assert out.row is not None and out.infra_error is None
    assert (out.row.verdict, out.row.code, out.row.speedup) == ("ok", TIED, None)
    assert "tied within noise" in out.row.message
    # the selection round keeps retrying it (infrastructure), as before
    main = run_job(_job("main"))
    assert main.row is None and main.infra_error is not None
    assert "timing_unreliable" in main.infra_error
    # a correctness failure is never a tie
    assert not tied_within_noise(_unreliable(passed=False))
    # before its last attempt a re-run is retried, like the selection round's jobs
    early = run_job(dataclasses.replace(_job("rerun"), tie_final=False))
    assert early.row is None and "timing_unreliable" in (early.infra_error or "")


def _row(sub: str, rnd: str, code: str | None, speedup: float | None) -> EvalRow:
    return EvalRow(submission=sub, task="t", file_sha=SHA, round=rnd, verdict="ok", stage=None,
                   code=code, message="m", speedup=speedup, speedup_source=None, t_sub_ms=None,
                   report_json=None, wall_s=0.0, engine="local")


def test_entries_the_rerun_cannot_separate_share_a_rank() -> None:
    subs = {s: {"t": SHA} for s in ("a", "b", "c")}
    rows = [_row(s, "main", None, x) for s, x in (("a", 3.0), ("b", 2.0), ("c", 1.5))]
    rows += [_row("a", "rerun", None, 2.5), _row("b", "rerun", TIED, None),
             _row("c", "rerun", TIED, None)]
    b = board(rows, subs, ["t"], ["a", "b", "c"])
    assert [(e.submission, e.rank, e.tied) for e in b.ranked] == \
        [("a", 1, False), ("b", 2, True), ("c", 2, True)]
    all_tied = [_row(s, "rerun", TIED, None) for s in ("a", "b", "c")]
    b = board(rows[:3] + all_tied, subs, ["t"], ["a", "b", "c"])
    assert [e.rank for e in b.ranked] == [1, 1, 1] and all(e.tied for e in b.ranked)


def test_the_page_says_tied_within_noise(tmp_path: Path) -> None:
    with State.open(tmp_path / "s.sqlite") as st:
        st.set_meta("tasks", ["t"])
        st.set_meta("top", ["a", "b"])
        st.set_meta("top_k", 2)
        for s in ("a", "b"):
            st.record_submission(SubmissionRow(s, SHA, "valid", "ok", None, {"t": SHA}))
            st.record_evaluation(_row(s, "main", None, 1.2))
            st.record_evaluation(_row(s, "rerun", TIED, None))
    html = render_site(tmp_path / "s.sqlite", tmp_path / "site").read_text()
    assert "1 (tied within noise)" in html and "no ranked entries yet" not in html


def test_a_resumed_state_refuses_another_secret(tmp_path: Path) -> None:
    one, two = Secret(b"1" * 32, "file one"), Secret(b"2" * 32, "random for this invocation")
    with State.open(tmp_path / "s.sqlite") as st:
        assert check_seeds(st, one) is None
        assert check_seeds(st, one) is None  # the same secret resumes
        with pytest.raises(UsageError) as e:
            check_seeds(st, two)
    err: Any = e.value
    assert err.code == "seed_secret_mismatch" and "random secret never matches" in str(err)
    assert "1111" not in str(err)  # the secret itself is never printed


def test_a_state_without_a_fingerprint_says_so_once(tmp_path: Path) -> None:
    with State.open(tmp_path / "s.sqlite") as st:
        st.record_evaluation(_row("a", "main", None, 1.0))
        note = check_seeds(st, Secret(b"1" * 32, "file one"))
        assert note is not None and "older kgrader" in note
        assert check_seeds(st, Secret(b"1" * 32, "file one")) is None
