"""The leaderboard's state: one SQLite file, versioned, safe against ``kill -9``.

Durability rules:

* WAL journal and ``synchronous=FULL``: a committed transaction survives the process
  being killed at any instant (and a power cut), and readers never block the writer;
* every finished evaluation is committed in its own transaction, so a killed run loses
  at most the evaluations that were still running;
* only the driver process writes (engines hand results back to it; Ray workers never
  open this file);
* one run at a time: ``kgrader leaderboard run`` holds :func:`exclusive` on the file for
  its whole run (a second one is refused at once, naming the holder);
* the file carries ``schema_version``; a file written by another schema is refused with
  a message and is never modified (see :class:`StateSchemaError`).

The operator's seed secret is never stored here: rows hold reports whose secret-seed
values were redacted by :mod:`grader.leaderboard.job`.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grader.db import transaction as _tx
from grader.errors import UsageError

SCHEMA_VERSION = 1

_TABLES = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
  name TEXT NOT NULL, spec_sha TEXT NOT NULL, reference_ok INTEGER NOT NULL,
  code TEXT, message TEXT NOT NULL, report_json TEXT, checked_at TEXT NOT NULL,
  PRIMARY KEY (name, spec_sha));
CREATE TABLE IF NOT EXISTS submissions (
  name TEXT PRIMARY KEY, content_sha TEXT NOT NULL, status TEXT NOT NULL,
  message TEXT NOT NULL, duplicate_of TEXT, files_json TEXT NOT NULL, seen_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS evaluations (
  submission TEXT NOT NULL, task TEXT NOT NULL, file_sha TEXT NOT NULL, round TEXT NOT NULL,
  verdict TEXT NOT NULL, stage TEXT, code TEXT, message TEXT NOT NULL,
  speedup REAL, speedup_source TEXT, t_sub_ms REAL, report_json TEXT,
  wall_s REAL NOT NULL, engine TEXT NOT NULL, finished_at TEXT NOT NULL,
  PRIMARY KEY (submission, task, file_sha, round));
"""


class StateBusy(UsageError):
    """Another live process holds the state's lock."""

    code = "state_locked"


@contextmanager
def exclusive(path: str | Path) -> Iterator[None]:
    """Hold the run lock of the state file ``path`` (``<path>.lock``, an ``flock`` beside
    it) for the block; a second holder fails at once with :class:`StateBusy` naming the
    holder's pid. The kernel drops the lock when its holder dies, ``kill -9`` included,
    so a killed run never blocks its own resume. The lock file stays (removing it would
    let two processes lock two different files)."""
    p = Path(path)
    lock = p.with_name(p.name + ".lock")
    try:
        p.absolute().parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise UsageError(f"cannot open the lock file {lock} of --state {p}: {e}",
                         code="bad_output_path") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            raise StateBusy(f"--state {p} is in use by another `kgrader leaderboard run` "
                            f"(pid {holder}); wait for it to finish or stop it, or pass "
                            "another --state") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


class StateSchemaError(UsageError):
    """The state file was written by another schema version; it was left untouched."""

    code = "state_schema"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class EvalRow:
    """One finished evaluation of one submission file on one task.

    ``round`` is ``main`` (the measurement every entry gets, used for selection) or
    ``rerun`` (the independent re-measurement of a top-K entry, the published figure).
    ``verdict``: ``ok`` (correct, timed), ``failed`` (any stage failed), ``anomaly``
    (faster than the roofline floor), ``skipped`` (never run, e.g. a task not entered).
    """

    submission: str
    task: str
    file_sha: str
    round: str
    verdict: str
    stage: str | None
    code: str | None
    message: str
    speedup: float | None
    speedup_source: str | None
    t_sub_ms: float | None
    report_json: str | None
    wall_s: float
    engine: str
    finished_at: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.submission, self.task, self.file_sha, self.round)


@dataclass(frozen=True)
class TaskCheck:
    """The outcome of running a task's reference as a candidate (before the batch)."""

    name: str
    spec_sha: str
    reference_ok: bool
    code: str | None
    message: str
    report_json: str | None
    checked_at: str = ""


@dataclass(frozen=True)
class SubmissionRow:
    """A submission as found on disk: ``status`` is ``valid``, ``invalid`` or ``duplicate``."""

    name: str
    content_sha: str
    status: str
    message: str
    duplicate_of: str | None
    files: dict[str, str]
    seen_at: str = ""


class State:
    """The open state file. Use :meth:`open`; close with :meth:`close` or ``with``."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self.conn = conn
        self.path = path

    @classmethod
    def open(cls, path: str | Path, *, create: bool = True) -> State:
        """Open (and with ``create``, initialise) the state; refuse other schema versions."""
        p = Path(path)
        if not p.exists() and not create:
            raise UsageError(f"state file not found: {p}")
        existed = p.exists() and p.stat().st_size > 0
        try:
            conn = sqlite3.connect(str(p), isolation_level=None, timeout=30.0)
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.DatabaseError as e:
            raise UsageError(f"{p} is not a kgrader leaderboard state (SQLite said: {e})") from None
        if existed and names:
            _check_version(conn, p, names)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        if not names:
            with _tx(conn):
                for stmt in filter(str.strip, _TABLES.split(";")):
                    conn.execute(stmt)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        return cls(conn, p)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> State:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- meta -------------------------------------------------------------------------
    def set_meta(self, key: str, value: Any) -> None:
        with _tx(self.conn):
            self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                              (key, json.dumps(value)))

    def meta(self, key: str, default: Any = None) -> Any:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    # --- tasks ------------------------------------------------------------------------
    def record_task_check(self, check: TaskCheck) -> None:
        row = asdict(check) | {"checked_at": check.checked_at or _now(),
                               "reference_ok": int(check.reference_ok)}
        with _tx(self.conn):
            self.conn.execute(
                "INSERT OR REPLACE INTO tasks (name, spec_sha, reference_ok, code, message, "
                "report_json, checked_at) VALUES (:name, :spec_sha, :reference_ok, :code, "
                ":message, :report_json, :checked_at)", row)

    def task_check(self, name: str, spec_sha: str) -> TaskCheck | None:
        r = self.conn.execute("SELECT name, spec_sha, reference_ok, code, message, report_json, "
                              "checked_at FROM tasks WHERE name = ? AND spec_sha = ?",
                              (name, spec_sha)).fetchone()
        return None if r is None else TaskCheck(r[0], r[1], bool(r[2]), r[3], r[4], r[5], r[6])

    def task_checks(self) -> list[TaskCheck]:
        rows = self.conn.execute("SELECT name, spec_sha, reference_ok, code, message, report_json, "
                                 "checked_at FROM tasks ORDER BY name, checked_at").fetchall()
        return [TaskCheck(r[0], r[1], bool(r[2]), r[3], r[4], r[5], r[6]) for r in rows]

    # --- submissions ------------------------------------------------------------------
    def record_submission(self, sub: SubmissionRow) -> None:
        with _tx(self.conn):
            self.conn.execute(
                "INSERT OR REPLACE INTO submissions (name, content_sha, status, message, "
                "duplicate_of, files_json, seen_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (sub.name, sub.content_sha, sub.status, sub.message, sub.duplicate_of,
                 json.dumps(sub.files, sort_keys=True), sub.seen_at or _now()))

    def submissions(self) -> list[SubmissionRow]:
        rows = self.conn.execute("SELECT name, content_sha, status, message, duplicate_of, "
                                 "files_json, seen_at FROM submissions ORDER BY name").fetchall()
        return [SubmissionRow(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6]) for r in rows]

    # --- evaluations ------------------------------------------------------------------
    def record_evaluation(self, row: EvalRow, replace: bool = False) -> bool:
        """Commit one result in its own transaction; False when that key was already done.

        ``replace`` overwrites a row of the same key (used for re-tried reference checks).
        """
        values = asdict(row) | {"finished_at": row.finished_at or _now()}
        cols = ", ".join(values)
        marks = ", ".join(f":{k}" for k in values)
        with _tx(self.conn):
            verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
            cur = self.conn.execute(f"{verb} INTO evaluations ({cols}) VALUES ({marks})", values)
            return cur.rowcount == 1

    def done_keys(self) -> set[tuple[str, str, str, str]]:
        rows = self.conn.execute("SELECT submission, task, file_sha, round FROM evaluations")
        return {(r[0], r[1], r[2], r[3]) for r in rows}

    def evaluations(self) -> list[EvalRow]:
        names = [f.name for f in fields(EvalRow)]
        rows = self.conn.execute(f"SELECT {', '.join(names)} FROM evaluations "
                                 "ORDER BY submission, task, round").fetchall()
        return [EvalRow(**dict(zip(names, r, strict=True))) for r in rows]

    def count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])




def _check_version(conn: sqlite3.Connection, path: Path, tables: set[str]) -> None:
    """Refuse, without writing, a file that is not this schema's state."""
    if "schema_version" not in tables:
        conn.close()
        raise StateSchemaError(
            f"{path} is an SQLite file but not a kgrader leaderboard state (no schema_version "
            "table); it was not modified. Pass a new --state file.")
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    found = row[0] if row else None
    if found == SCHEMA_VERSION:
        return
    conn.close()
    if isinstance(found, int) and found < SCHEMA_VERSION:
        raise StateSchemaError(
            f"{path} has leaderboard state schema version {found}, older than the version "
            f"{SCHEMA_VERSION} this kgrader reads; it was not modified. To migrate: render it "
            "with the kgrader version that wrote it if you need its page, then run "
            "`kgrader leaderboard run` with a new --state file (finished evaluations in the "
            "old file stay readable with `sqlite3 FILE 'SELECT * FROM evaluations'`).")
    raise StateSchemaError(
        f"{path} has leaderboard state schema version {found!r}, which this kgrader (schema "
        f"{SCHEMA_VERSION}) does not know; it was not modified. Use a newer kgrader.")
