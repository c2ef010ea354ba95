"""The live board is a view of the store: a leaderboard result the board missed (a server
killed between the two commits) is added when the next server starts."""

from __future__ import annotations

import shutil
from pathlib import Path

from grader.leaderboard.seeds import Secret
from grader.leaderboard.state import State
from grader.report.model import Report
from grader.service.board import Board
from grader.service.store import Store
from grader.service.worker import load_tasks

TASK = Path(__file__).resolve().parents[2] / "examples" / "vector_add_small"


def _done_leaderboard_job(store: Store, label: str) -> str:
    job = store.submit(token_id="tok1", task="vector_add_small", mode="leaderboard",
                       label=label, source="x = 1\n", source_sha=label * 8, view_sha="v",
                       max_active=10, max_per_day=10)
    assert not isinstance(job, str)
    c = store.claim("w0")
    assert c is not None
    report = Report(ok=False, stage="compile", task="vector_add_small")
    assert store.finish(c.job.id, c.attempt, state="done", verdict="failed",
                        report_json=report.model_dump_json(), error=None)
    return job.id


def test_a_result_the_board_missed_is_added_at_the_next_start(tmp_path: Path) -> None:
    shutil.copytree(TASK, tmp_path / "tasks" / TASK.name)
    tasks = load_tasks(tmp_path / "tasks", Secret(b"k" * 32, "test"))
    store = Store(tmp_path / "s.sqlite")
    board = Board(tmp_path / "board", store, tasks)
    first = _done_leaderboard_job(store, "a")
    board.record(first)
    _done_leaderboard_job(store, "b")  # the server dies before its board row
    again = Board(tmp_path / "board", store, tasks)  # the next start syncs
    with State.open(again.state_path) as st:
        rows = st.evaluations()
    assert sorted(r.submission for r in rows) == ["tok1/a", "tok1/b"]
    assert again.sync() == 0  # nothing twice
    page = again.read("index.html")
    assert page is not None and b"tok1/b" in page
    assert again.read("../s.sqlite") is None and again.read("eval/x.html") is None
