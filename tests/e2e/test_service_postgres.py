"""The service store on a real PostgreSQL server this test starts (initdb + pg_ctl in a
temporary folder, a Unix socket only): the queue's tests of tests/unit/test_service_store.py
run again on it, and a server started with ``--db postgresql://...`` grades through it."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_service_store import (  # noqa: F401  (collected here again, on PostgreSQL)
    test_a_job_moves_queued_running_done_once_and_records_one_grade,
    test_a_requeued_job_is_not_claimed_before_its_backoff_is_over,
    test_a_version_1_store_is_upgraded_in_place_and_keeps_its_jobs,
    test_an_accepted_job_becomes_its_tasks_best_in_the_same_commit,
    test_concurrent_submissions_cannot_overrun_a_quota,
    test_concurrent_workers_claim_every_job_exactly_once,
    test_quotas_refuse_active_and_daily_overflow_per_token,
    test_recover_makes_a_job_waiting_out_its_backoff_claimable_at_once,
    test_recover_requeues_running_jobs_and_never_touches_finished_ones,
    test_requeue_then_failed_after_the_last_attempt,
)

pytest.importorskip("psycopg")
BIN = next((p for p in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
            if (p / "initdb").exists()), None) if Path("/usr/lib/postgresql").is_dir() else None
pytestmark = pytest.mark.skipif(BIN is None, reason="PostgreSQL is not installed "
                                "(apt-get install -y postgresql)")


def _as_postgres(argv: list[str]) -> list[str]:
    """initdb refuses root: run the server as the postgres user when we are root."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *argv]
    return argv


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str]:
    assert BIN is not None
    # Not under pytest's tmp folders: they are 0700 root, and the server runs as postgres.
    root = Path(tempfile.mkdtemp(prefix="kgrader-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    user = "postgres" if os.geteuid() == 0 else getpass.getuser()
    subprocess.run(_as_postgres([str(BIN / "initdb"), "-D", str(data), "-U", user,
                                 "--auth=trust", "-E", "UTF8"]),
                   check=True, capture_output=True, timeout=120)
    subprocess.run(_as_postgres([str(BIN / "pg_ctl"), "-D", str(data), "-w", "-t", "60",
                                 "-l", str(root / "log"), "-o",
                                 f"-c listen_addresses='' -k {sock} -p 5499", "start"]),
                   check=True, capture_output=True, timeout=120)
    try:
        yield f"postgresql://{user}@/postgres?host={sock}&port=5499"
    finally:
        subprocess.run(_as_postgres([str(BIN / "pg_ctl"), "-D", str(data), "-m", "immediate",
                                     "stop"]), capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def target(pg_server: str) -> str:
    """A fresh database per test on the module's server."""
    import psycopg

    name = "kg_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_server, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    return pg_server.replace("/postgres?", f"/{name}?")


def test_a_database_that_is_not_a_service_store_is_refused(target: str) -> None:
    import psycopg

    from grader.service.store import Store, StoreError

    with psycopg.connect(target, autocommit=True) as c:
        c.execute("CREATE TABLE something (a int)")
    with pytest.raises(StoreError, match="not a kgrader service store"):
        Store(target)


def test_an_unreachable_server_is_a_clear_store_error() -> None:
    from grader.service.store import Store, StoreError

    with pytest.raises(StoreError, match="cannot connect to the PostgreSQL store"):
        Store("postgresql://nobody@/x?host=/nonexistent&port=1")


def test_a_server_on_postgresql_grades_a_real_submission_and_survives_a_restart(
        target: str, tmp_path: Path) -> None:
    from tests.e2e._backends import backend_or_skip
    from tests.e2e.test_service_e2e import TASK, Server, _kgrader

    backend_or_skip("bwrap")
    srv = Server(tmp_path, "--db", target)
    try:
        tok = srv.token("alice")
        srv.start()
        r = _kgrader("submit", "--server", srv.url, "--json", TASK.name,
                     str(TASK / "candidates" / "good.py"), token=tok)
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["submission"]["verdict"] == "passed"
        srv.stop(signal.SIGKILL)
        srv.start()  # the same database: the job is there, finished, not graded again
        listed = _kgrader("status", "--server", srv.url, "--json", token=tok)
        jobs = json.loads(listed.stdout)["submissions"]
        assert [(j["state"], j["attempts"]) for j in jobs] == [("done", 1)]
        assert not (srv.data / "service.sqlite").exists()  # the store is PostgreSQL's
    finally:
        srv.stop(signal.SIGKILL)
