"""The leaderboard page's pure parts: the runner keeps infrastructure errors for the page,
the page lists them (scrubbed, escaped), and an evaluation page's verdict line agrees with
its report. The page as a browser shows it is tests/e2e/test_leaderboard_page.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.leaderboard.aggregate import INFRA_META, infra_key
from grader.leaderboard.job import Job, JobOutcome
from grader.leaderboard.progress import Progress
from grader.leaderboard.render import _eval_page, render_state
from grader.leaderboard.runner import Batch, RunConfig
from grader.leaderboard.seeds import TaskPayload
from grader.leaderboard.state import EvalRow, State, SubmissionRow

SHA = "e" * 64


class _NoEngine:
    name = "local"
    workers = 1


def _row(verdict: str, report: dict[str, object] | None) -> EvalRow:
    return EvalRow(submission="s", task="t", file_sha=SHA, round="main", verdict=verdict,
                   stage="accept", code=None, message="correct", speedup=0.5,
                   speedup_source="pairs", t_sub_ms=2.0,
                   report_json=None if report is None else json.dumps(report), wall_s=1.0,
                   engine="local")


def test_the_runner_keeps_an_infrastructure_error_until_the_evaluation_is_committed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGRADER_EXPERIENCE", str(tmp_path / "exp.sqlite"))
    task = TaskPayload(name="t", task_json="{}", reference="", seeds=(123457,))
    job = Job(submission="s", task=task, file_sha=SHA, round="main", source="x = 1\n")
    with State.open(tmp_path / "lb.sqlite") as st:
        batch = Batch(RunConfig(tasks=[], submissions=tmp_path), st, _NoEngine(),  # type: ignore[arg-type]
                      Progress(enabled=False))
        batch._on_result(job, JobOutcome(None, "sandbox_unavailable: seed 123457 leaked"))
        notes = st.meta(INFRA_META)
        assert list(notes) == [infra_key("s", "t", "main")]
        assert "123457" not in notes[infra_key("s", "t", "main")]  # secret seeds redacted
        assert st.count() == 0  # never committed: retried by the next run
        batch._on_result(job, JobOutcome(_row("ok", None)))
        assert st.meta(INFRA_META) == {} and st.count() == 1


def test_the_page_lists_a_pending_evaluation_with_its_escaped_reason(tmp_path: Path) -> None:
    with State.open(tmp_path / "lb.sqlite") as st:
        st.set_meta("tasks", ["t"])
        st.record_submission(SubmissionRow("s", "c" * 64, "valid", "ok", None, {"t": SHA}))
        st.set_meta(INFRA_META, {infra_key("s", "t", "main"): "boom <b>x</b>"})
        index = render_state(st, tmp_path / "site")
    html = index.read_text()
    assert "infrastructure error, retried by the next run: boom &lt;b&gt;x&lt;/b&gt;" in html
    assert "<b>x</b>" not in html
    assert "no entries yet" in html  # the unranked table: s is pending, not an entry
    assert "selected when every main-round evaluation is in" in html  # no "top" meta yet


def test_a_correct_but_slower_evaluation_page_explains_the_reports_ok_false() -> None:
    page = _eval_page(_row("ok", {"ok": False, "acceptance": {
        "accepted": False, "reason": "seed rule: median improvement -1 below 0.01"}}))
    assert "Leaderboard verdict: correct" in page
    assert "&quot;ok&quot;: false because its acceptance rule did not accept" in page
    assert "median improvement -1 below 0.01" in page
    failed = _eval_page(_row("failed", {"ok": False}))
    assert "Leaderboard verdict: failed; the report says &quot;ok&quot;: false." in failed
