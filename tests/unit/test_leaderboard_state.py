"""The leaderboard state: resumable, one transaction per result, schema-versioned."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from grader.leaderboard.state import SCHEMA_VERSION, EvalRow, State, StateSchemaError


def row(sub: str = "a", task: str = "t", rnd: str = "main", verdict: str = "ok",
        speedup: float | None = 1.5) -> EvalRow:
    return EvalRow(submission=sub, task=task, file_sha="f" * 64, round=rnd, verdict=verdict,
                   stage="accept", code=None, message="correct", speedup=speedup,
                   speedup_source="pairs", t_sub_ms=1.0, report_json="{}", wall_s=1.0,
                   engine="local")


def test_new_state_uses_wal_and_records_its_schema_version(tmp_path: Path) -> None:
    with State.open(tmp_path / "s.sqlite") as st:
        assert st.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert st.conn.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION


def test_committed_results_survive_reopening_and_are_not_recorded_twice(tmp_path: Path) -> None:
    p = tmp_path / "s.sqlite"
    with State.open(p) as st:
        assert st.record_evaluation(row("a"))
        assert st.record_evaluation(row("b", verdict="failed", speedup=None))
    with State.open(p) as st:
        assert st.done_keys() == {row("a").key, row("b").key}
        assert not st.record_evaluation(row("a", speedup=9.0))  # already done: ignored
        assert [r.speedup for r in st.evaluations()] == [1.5, None]


def test_older_schema_is_refused_with_a_migration_hint_and_left_untouched(tmp_path: Path) -> None:
    p = tmp_path / "old.sqlite"
    conn = sqlite3.connect(p)
    conn.executescript("CREATE TABLE schema_version (version INTEGER);"
                       "INSERT INTO schema_version VALUES (0);"
                       "CREATE TABLE evaluations (x TEXT); INSERT INTO evaluations VALUES ('keep');")
    conn.commit()
    conn.close()
    before = hashlib.sha256(p.read_bytes()).hexdigest()
    with pytest.raises(StateSchemaError, match=r"older than the version .* not modified.*--state"):
        State.open(p)
    assert hashlib.sha256(p.read_bytes()).hexdigest() == before


def test_newer_schema_and_foreign_sqlite_files_are_refused(tmp_path: Path) -> None:
    newer = tmp_path / "new.sqlite"
    conn = sqlite3.connect(newer)
    conn.executescript(f"CREATE TABLE schema_version (version INTEGER);"
                       f"INSERT INTO schema_version VALUES ({SCHEMA_VERSION + 1});")
    conn.close()
    with pytest.raises(StateSchemaError, match="newer kgrader"):
        State.open(newer)
    foreign = tmp_path / "foreign.sqlite"
    conn = sqlite3.connect(foreign)
    conn.executescript("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
    conn.close()
    with pytest.raises(StateSchemaError, match="not a kgrader leaderboard state"):
        State.open(foreign)


def test_a_transaction_that_fails_midway_is_rolled_back(tmp_path: Path) -> None:
    from grader.leaderboard.state import _tx

    with State.open(tmp_path / "s.sqlite") as st:
        with pytest.raises(RuntimeError), _tx(st.conn):
            st.conn.execute("INSERT INTO meta (key, value) VALUES ('k', '1')")
            raise RuntimeError("killed midway")
        assert st.meta("k") is None
        assert st.record_evaluation(row())
        assert st.count() == 1
