"""The store's SQLite schema, its version, and how a file is opened safely.

One file, WAL journal (readers never block the writer; several grading processes may
append at once, each waiting up to ``BUSY_TIMEOUT_MS`` for the write lock). The ``meta``
table holds ``schema_version`` and ``text_index`` (``fts5`` or ``like``: what full-text
search uses for this file). A file is touched only after it has been recognised:

* a missing or empty file is initialised (only where the caller asked to create);
* a file that is not SQLite, or SQLite without our ``meta`` table, is refused untouched;
* an older version is migrated forward by :data:`MIGRATIONS`, in one transaction;
* a newer version is refused untouched (:class:`ExperienceSchemaError`).

Full-text search needs SQLite's FTS5 module. When the interpreter's SQLite lacks it, a
new store is created without the index (``text_index = like``) and text queries fall back
to ``LIKE`` over the same columns; a store created *with* the index cannot be written by
such an interpreter, and says so.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from grader.db import transaction
from grader.experience.model import ExperienceError, ExperienceSchemaError
from grader.logs import get_logger

__all__ = ["BUSY_TIMEOUT_MS", "SCHEMA_VERSION", "Opened", "connect", "fts5_available", "transaction"]

log = get_logger("kgrader.experience")

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 30_000

_V1 = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS attempts (
      id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, created_at TEXT NOT NULL,
      stored_at TEXT NOT NULL, origin TEXT NOT NULL, origin_ref TEXT, task TEXT NOT NULL,
      tags TEXT NOT NULL, dtypes TEXT NOT NULL, device TEXT, hardware TEXT, hardware_key TEXT,
      candidate_sha256 TEXT, source TEXT, source_truncated INTEGER NOT NULL DEFAULT 0,
      stage TEXT, ok INTEGER NOT NULL, accepted INTEGER, first_code TEXT,
      messages TEXT NOT NULL DEFAULT '', warnings TEXT NOT NULL DEFAULT '[]',
      median_ms REAL, mean_ms REAL, min_ms REAL, bandwidth_gbps REAL, tflops REAL,
      speedup REAL, improvement_fraction REAL, min_improvement_fraction REAL,
      roofline_fraction REAL, bottleneck TEXT, diagnostics TEXT NOT NULL DEFAULT '',
      figures TEXT NOT NULL DEFAULT '{}')""",
    "CREATE INDEX IF NOT EXISTS attempts_task ON attempts (task, created_at)",
    "CREATE INDEX IF NOT EXISTS attempts_stage ON attempts (stage, ok)",
    """CREATE TABLE IF NOT EXISTS attempt_tags (
      attempt_id INTEGER NOT NULL REFERENCES attempts(id), tag TEXT NOT NULL,
      PRIMARY KEY (attempt_id, tag))""",
    "CREATE INDEX IF NOT EXISTS attempt_tags_tag ON attempt_tags (tag)",
    """CREATE TABLE IF NOT EXISTS attempt_errors (
      attempt_id INTEGER NOT NULL REFERENCES attempts(id), idx INTEGER NOT NULL,
      stage TEXT NOT NULL, code TEXT NOT NULL, message TEXT NOT NULL, line INTEGER,
      PRIMARY KEY (attempt_id, idx))""",
    "CREATE INDEX IF NOT EXISTS attempt_errors_code ON attempt_errors (code)",
    """CREATE TABLE IF NOT EXISTS attempt_dims (
      attempt_id INTEGER NOT NULL REFERENCES attempts(id), shape INTEGER NOT NULL,
      kind TEXT NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL,
      PRIMARY KEY (attempt_id, shape, name))""",
    "CREATE INDEX IF NOT EXISTS attempt_dims_name ON attempt_dims (name, value)",
)
_FTS = ("CREATE VIRTUAL TABLE IF NOT EXISTS attempts_fts USING "
        "fts5(messages, diagnostics, source, tokenize = 'unicode61')")

# MIGRATIONS[v] brings a store from version v-1 to v (version 0: an empty file).
MIGRATIONS: dict[int, tuple[str, ...]] = {1: _V1}


def fts5_available() -> bool:
    """Whether this interpreter's SQLite has the FTS5 module."""
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    except sqlite3.OperationalError:
        return False
    return True




def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table')")}


def _version(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version; 0 for an empty database; refuse foreign files."""
    names = _tables(conn)
    if not names:
        return 0
    if "meta" not in names or "attempts" not in names:
        raise ExperienceError(f"{path} is an SQLite file but not a kgrader experience store "
                              "(no meta/attempts tables); it was not modified")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        return int(row[0]) if row is not None else -1
    except ValueError:
        return -1


def _check(found: int, path: Path) -> None:
    if found < 0:
        raise ExperienceError(f"{path}: the meta table has no valid schema_version; it was not modified")
    if found > SCHEMA_VERSION:
        raise ExperienceSchemaError(
            f"{path} has experience store schema version {found}, newer than the version "
            f"{SCHEMA_VERSION} this kgrader knows; it was not modified. Use a newer kgrader "
            "or another store (--db PATH or $KGRADER_EXPERIENCE).")


def _migrate(conn: sqlite3.Connection, path: Path, fts: bool) -> None:
    with transaction(conn):
        found = _version(conn, path)  # again, under the write lock: another process may have won
        _check(found, path)
        for v in range(found + 1, SCHEMA_VERSION + 1):
            for stmt in MIGRATIONS[v]:
                conn.execute(stmt)
            if found == 0 and v == 1:
                index = "fts5" if fts else "like"
                if fts:
                    conn.execute(_FTS)
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('text_index', ?)", (index,))
                conn.execute("INSERT OR REPLACE INTO meta VALUES ('created_at', ?)",
                             (datetime.now(UTC).isoformat(timespec="seconds"),))
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(v),))
            log.info("experience_schema_migrated", path=str(path), to_version=v)


@dataclass(frozen=True)
class Opened:
    """An open store: the connection (autocommit), its text index, and whether FTS5 works here."""

    conn: sqlite3.Connection
    text_index: str  # "fts5" or "like", as the file's meta says
    fts: bool  # text queries use FTS5 (the file has the index and this SQLite has the module)


def connect(path: Path, *, create: bool, use_fts: bool | None = None) -> Opened:
    """Open (with ``create``, initialise or migrate) the store at ``path``.

    ``use_fts`` forces the choice for a *new* store (tests of the fallback);
    ``None`` picks FTS5 when the interpreter has it.
    """
    if path.is_dir():
        raise ExperienceError(f"experience store path {path} is a directory, not a file")
    if not create and not path.is_file():
        raise ExperienceError(f"no experience store at {path}",
                              hint="grade something with `kgrader run --records DIR`, or "
                                   "`kgrader experience add RECORDS_DIR`; or pass --db PATH")
    have_fts = fts5_available()
    fts = have_fts if use_fts is None else (use_fts and have_fts)
    if create and not have_fts and not path.exists():
        log.warning("experience_fts5_unavailable", path=str(path),
                    detail="this Python's SQLite has no FTS5 module: the new store has no "
                           "text index and text search uses LIKE")
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ExperienceError(f"cannot create the folder of {path}: {e.strerror or e}") from None
    try:
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except sqlite3.Error as e:
        raise ExperienceError(f"cannot open the experience store {path}: {e}") from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS:d}")
        found = _version(conn, path)  # raises sqlite3.DatabaseError on a file that is not SQLite
        _check(found, path)
        if found == 0 and not create:
            raise ExperienceError(f"{path} is an empty file, not an experience store")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        if found < SCHEMA_VERSION:
            if not create:
                raise ExperienceError(f"{path} has schema version {found}; open it for writing "
                                      "(e.g. `kgrader experience add`) to migrate it")
            _migrate(conn, path, fts)
        row = conn.execute("SELECT value FROM meta WHERE key = 'text_index'").fetchone()
    except ExperienceError:
        conn.close()
        raise
    except sqlite3.DatabaseError as e:
        conn.close()
        raise ExperienceError(f"{path} is not a readable kgrader experience store "
                              f"(SQLite said: {e}); it was not modified") from None
    index = "fts5" if row is not None and row[0] == "fts5" else "like"
    if index == "fts5" and not have_fts:
        log.warning("experience_fts5_missing", path=str(path),
                    detail="store has an FTS5 index but this SQLite lacks FTS5: text search "
                           "falls back to LIKE and writes are refused")
    return Opened(conn, index, index == "fts5" and have_fts)
