"""The service's queue: each move once, quotas in one transaction, a restart loses nothing."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from grader.service.store import Store, StoreError


@pytest.fixture
def target(tmp_path: Path) -> str | Path:
    """Where the store lives: an SQLite file here; a PostgreSQL database in
    tests/e2e/test_service_postgres.py, which runs these tests again on a real server."""
    return tmp_path / "s.sqlite"


def _submit(store: Store, token: str = "t1", *, max_active: int = 100, max_per_day: int = 100,
            now: float | None = None) -> str:
    job = store.submit(token_id=token, task="vector_add_small", mode="run", label="",
                       source="print(1)\n", source_sha="s", view_sha="v",
                       max_active=max_active, max_per_day=max_per_day, now=now)
    assert not isinstance(job, str), job
    return job.id


def test_a_job_moves_queued_running_done_once_and_records_one_grade(target: str | Path) -> None:
    store = Store(target)
    jid = _submit(store)
    c = store.claim("w0")
    assert c is not None and c.job.id == jid and c.job.state == "running" and c.attempt == 1
    assert store.claim("w1") is None  # nothing else queued: a running job is not claimed twice
    assert store.finish(jid, 1, state="done", verdict="passed", report_json="{}", error=None)
    assert not store.finish(jid, 1, state="failed", verdict=None, report_json=None, error="x")
    job = store.job(jid)
    assert job is not None and job.state == "done" and job.verdict == "passed" and job.grades == 1
    assert [k for _, _, k, _ in store.events(jid)] == ["queued", "running", "done"]
    with pytest.raises(ValueError):
        store.finish(jid, 1, state="running", verdict=None, report_json=None, error=None)


def test_recover_requeues_running_jobs_and_never_touches_finished_ones(target: str | Path) -> None:
    path = target
    store = Store(path)
    done, running, queued = _submit(store), _submit(store), _submit(store)
    c = store.claim("w0")
    assert c is not None and c.job.id == done
    store.finish(done, 1, state="done", verdict="passed", report_json="{}", error=None)
    c2 = store.claim("w0")
    assert c2 is not None and c2.job.id == running
    # The server is killed here; a new process opens the same file.
    again = Store(path)
    assert again.recover() == [running]
    assert again.counts() == {"queued": 2, "running": 0, "done": 1, "failed": 0,
                              "cancelled": 0}
    # The old claim cannot finish the job any more (it is queued again, attempt 1 is stale).
    assert not again.finish(running, 1, state="done", verdict="passed", report_json="{}",
                            error=None)
    order = [again.claim("w0"), again.claim("w0")]
    assert [c.job.id for c in order if c] == [running, queued]  # oldest first
    assert order[0] is not None and order[0].attempt == 2
    assert "requeued" in [k for _, _, k, _ in again.events(running)]
    assert again.job(done) is not None and again.job(done).grades == 1  # type: ignore[union-attr]


def test_requeue_then_failed_after_the_last_attempt(target: str | Path) -> None:
    store = Store(target)
    jid = _submit(store)
    c = store.claim("w0")
    assert c is not None and store.requeue(jid, 1, "sandbox_unavailable: no bwrap")
    assert not store.requeue(jid, 1, "again")  # not running any more
    c = store.claim("w0")
    assert c is not None and c.attempt == 2
    assert store.finish(jid, 2, state="failed", verdict=None, report_json=None, error="gone")
    job = store.job(jid)
    assert job is not None and job.state == "failed" and job.grades == 0
    assert store.stats() == {"jobs": {"queued": 0, "running": 0, "done": 0, "failed": 1,
                                     "cancelled": 0},
                             "claims": 2, "grades": 0, "max_grades_per_job": 0}


def test_quotas_refuse_active_and_daily_overflow_per_token(target: str | Path) -> None:
    store = Store(target)
    _submit(store, max_active=1)
    refused = store.submit(token_id="t1", task="x", mode="run", label="", source="s",
                           source_sha="s", view_sha="v", max_active=1, max_per_day=100)
    assert refused == "max_active"
    _submit(store, "t2", max_active=1)  # another token has its own quota
    day = store.submit(token_id="t3", task="x", mode="run", label="", source="s", source_sha="s",
                       view_sha="v", max_active=10, max_per_day=0)
    assert day == "max_per_day"
    _submit(store, "t4", max_per_day=1, now=1000.0)
    _submit(store, "t4", max_per_day=1, now=1000.0 + 86401)  # a day later: room again


def test_concurrent_submissions_cannot_overrun_a_quota(target: str | Path) -> None:
    path = target
    Store(path)
    results: list[object] = []

    def one() -> None:
        s = Store(path)
        results.append(s.submit(token_id="t", task="x", mode="run", label="", source="s",
                                source_sha="s", view_sha="v", max_active=3, max_per_day=100))

    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(1 for r in results if not isinstance(r, str)) == 3
    assert Store(path).counts()["queued"] == 3


def test_concurrent_workers_claim_every_job_exactly_once(target: str | Path) -> None:
    path = target
    store = Store(path)
    ids = {_submit(store) for _ in range(30)}
    claimed: list[str] = []
    lock = threading.Lock()

    def worker(name: str) -> None:
        s = Store(path)
        while (c := s.claim(name)) is not None:
            assert s.finish(c.job.id, c.attempt, state="done", verdict="passed",
                            report_json="{}", error=None)
            with lock:
                claimed.append(c.job.id)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(ids)
    assert store.stats()["max_grades_per_job"] == 1


def test_a_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    import sqlite3

    p = tmp_path / "other.sqlite"
    sqlite3.connect(p).execute("CREATE TABLE x (a)")
    with pytest.raises(StoreError, match="not a kgrader service store"):
        Store(p)


def test_an_accepted_job_becomes_its_tasks_best_in_the_same_commit(target: str | Path) -> None:
    store = Store(target)
    assert store.best("vector_add_small") is None
    for text in ("first = 1\n", "second = 2\n"):
        _submit(store)
        c = store.claim("w0")
        assert c is not None
        entry = store.best_entry("vector_add_small")
        assert store.finish(c.job.id, c.attempt, state="done", verdict="accepted",
                            report_json="{}", error=None, best_source=text,
                            best_was=entry[0] if entry else "")
        assert store.best("vector_add_small") == text
    assert [j.state for j in store.finished("run")] == ["done", "done"]


def test_two_accepts_graded_against_one_old_best_never_both_become_best(target: str | Path) -> None:
    from grader.service.store import BestChanged

    store = Store(target)
    a, b = _submit(store), _submit(store)
    ca, cb = store.claim("w0"), store.claim("w1")
    assert ca is not None and cb is not None and {ca.job.id, cb.job.id} == {a, b}
    assert store.best_entry("vector_add_small") is None  # both graded against no best
    assert store.finish(ca.job.id, ca.attempt, state="done", verdict="accepted", report_json="{}",
                        error=None, best_source="a = 1\n", best_was="")
    with pytest.raises(BestChanged):
        store.finish(cb.job.id, cb.attempt, state="done", verdict="accepted", report_json="{}",
                     error=None, best_source="b = 2\n", best_was="")
    assert store.best("vector_add_small") == "a = 1\n"
    assert store.job(cb.job.id).state == "running"  # nothing changed: the worker re-queues it
    assert store.requeue(cb.job.id, cb.attempt, "graded again against the new best")
    again = store.claim("w1")
    assert again is not None and again.job.id == cb.job.id
    best = store.best_entry("vector_add_small")
    assert best is not None and best[0] == ca.job.id
    assert store.finish(again.job.id, again.attempt, state="done", verdict="accepted",
                        report_json="{}", error=None, best_source="b = 2\n", best_was=best[0])
    assert store.best("vector_add_small") == "b = 2\n"


def test_a_requeued_job_is_not_claimed_before_its_backoff_is_over(target: str | Path) -> None:
    import time

    store = Store(target)
    slow, other = _submit(store), _submit(store)
    c = store.claim("w0")
    assert c is not None and c.job.id == slow
    assert store.requeue(slow, 1, "timing_unreliable: loaded host", delay_s=60.0)
    row = store.job(slow)
    assert row is not None and row.state == "queued" and row.not_before > time.time() + 50
    assert row.public()["not_before"] == row.not_before  # its owner sees when it runs again
    # the younger job goes first; the waiting one is claimable only once its time has come
    c2 = store.claim("w1")
    assert c2 is not None and c2.job.id == other
    assert store.claim("w1") is None
    c3 = store.claim("w1", now=time.time() + 61)
    assert c3 is not None and c3.job.id == slow and c3.attempt == 2
    events = store.events(slow)
    assert [k for _, _, k, _ in events] == ["queued", "running", "requeued", "running"]
    assert next(d for _, _, k, d in events if k == "requeued")["delay_s"] == 60.0


def test_recover_makes_a_job_waiting_out_its_backoff_claimable_at_once(target: str | Path) -> None:
    store = Store(target)
    jid = _submit(store)
    c = store.claim("w0")
    assert c is not None and store.requeue(jid, 1, "judge_killed", delay_s=600.0)
    c = store.claim("w0", now=store.job(jid).not_before)  # type: ignore[union-attr]
    assert c is not None  # running again, then the server is killed
    again = Store(target)
    assert again.recover() == [jid]
    c = again.claim("w0")
    assert c is not None and c.job.id == jid and c.attempt == 3


def test_a_version_1_store_is_upgraded_in_place_and_keeps_its_jobs(target: str | Path) -> None:
    store = Store(target)
    jid = _submit(store)
    with store.db.tx() as c:  # what a store written by the previous version looks like
        c.execute("ALTER TABLE jobs DROP COLUMN not_before")
        c.execute("DELETE FROM schema_version")
        c.execute("INSERT INTO schema_version (version) VALUES (1)")
    again = Store(target)
    row = again.job(jid)
    assert row is not None and row.state == "queued" and row.not_before == 0.0
    c2 = again.claim("w0")
    assert c2 is not None and c2.job.id == jid
    assert again.db.conn().execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == 2
    with again.db.tx() as c:
        c.execute("INSERT INTO schema_version (version) VALUES (7)")
    with pytest.raises(StoreError, match="version 7"):
        Store(target)


def test_cancel_moves_a_queued_or_running_job_once_and_a_running_grade_is_not_recorded(
        target: str | Path) -> None:
    store = Store(target)
    queued, running, done = _submit(store), _submit(store), _submit(store)
    c_run = store.claim("w0")  # the oldest: `queued` is claimed first, so claim in order
    assert c_run is not None and c_run.job.id == queued
    assert store.cancel(queued, "cancelled by its submitter") == ("running", True)
    # The worker's grade arrives after the cancel: it is not recorded, the job stays cancelled.
    assert not store.finish(queued, 1, state="done", verdict="passed", report_json="{}",
                            error=None)
    assert not store.requeue(queued, 1, "x")
    assert store.cancel(running, "cancelled by an operator") == ("queued", True)
    assert store.claim("w0") is not None  # `done`: the cancelled queued job is never claimed
    assert store.finish(done, 1, state="done", verdict="passed", report_json="{}", error=None)
    assert store.claim("w1") is None
    assert store.cancel(done, "late") == ("done", False)
    assert store.cancel(running, "again") == ("cancelled", False)
    job = store.job(queued)
    assert job is not None and job.state == "cancelled" and job.grades == 0
    assert job.error == "cancelled by its submitter"
    assert [k for _, _, k, _ in store.events(queued)] == ["queued", "running", "cancelled"]
    assert store.counts()["cancelled"] == 2 and store.counts()["done"] == 1
    with pytest.raises(KeyError):
        store.cancel("0" * 32, "x")


def test_a_step_event_is_recorded_only_while_its_attempt_runs(target: str | Path) -> None:
    store = Store(target)
    jid = _submit(store)
    assert not store.add_step(jid, 1, {"step": "judge: compile"})  # queued: not yet
    c = store.claim("w0")
    assert c is not None
    assert store.add_step(jid, 1, {"step": "judge: compile", "s": 0.5})
    assert not store.add_step(jid, 2, {"step": "judge: timing"})  # another attempt's
    assert store.finish(jid, 1, state="done", verdict="passed", report_json="{}", error=None)
    assert not store.add_step(jid, 1, {"step": "judge: timing"})  # never after the final event
    evs = store.events(jid)
    assert [k for _, _, k, _ in evs] == ["queued", "running", "step", "done"]
    assert evs[2][3] == {"step": "judge: compile", "s": 0.5}
