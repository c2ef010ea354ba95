"""The service's durable state: tokens, jobs, their events, bests; in one SQLite file
(WAL) or a PostgreSQL database (:mod:`grader.service.sql`).

A job moves ``queued -> running -> done | failed`` (or to ``cancelled``, from either, by
:meth:`Store.cancel`) and each move is one transaction
(SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: row locks), so two workers never claim the
same job and a job finishes once: :meth:`Store.finish` only moves a job that is
``running`` under the attempt that claimed it. :meth:`Store.recover` (at start-up) puts
the jobs a killed server left ``running`` back in the queue; ``done`` and ``failed`` are
final, never graded again. ``done`` means a report exists (whatever its verdict);
``failed`` means kgrader or the machine could not produce one after the allowed attempts.
A job re-queued for an infrastructure fault waits until its ``not_before`` (the worker's
backoff) before a worker may claim it again, so a loaded machine gets time to quieten.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.service.sql import Conn, Database, StoreError, is_url, open_database

SCHEMA_VERSION = 2
STATES = ("queued", "running", "done", "failed", "cancelled")
FINAL = ("done", "failed", "cancelled")

_TABLES = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (
  id TEXT PRIMARY KEY, name TEXT NOT NULL, role TEXT NOT NULL, sha256 TEXT NOT NULL,
  submit_per_min REAL NOT NULL, max_active INTEGER NOT NULL, max_per_day INTEGER NOT NULL,
  created_at REAL NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, token_id TEXT NOT NULL,
  task TEXT NOT NULL, mode TEXT NOT NULL, label TEXT NOT NULL, source TEXT NOT NULL,
  source_sha TEXT NOT NULL, view_sha TEXT NOT NULL, state TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0, grades INTEGER NOT NULL DEFAULT 0,
  worker TEXT, created_at REAL NOT NULL, started_at REAL, finished_at REAL,
  verdict TEXT, report_json TEXT, error TEXT, not_before REAL NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, seq);
CREATE INDEX IF NOT EXISTS jobs_token ON jobs (token_id, created_at);
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, at REAL NOT NULL,
  kind TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_job ON events (job_id, seq);
CREATE TABLE IF NOT EXISTS bests (
  task TEXT PRIMARY KEY, job_id TEXT NOT NULL, source TEXT NOT NULL, at REAL NOT NULL);
"""

_JOB_COLS = ("id", "token_id", "task", "mode", "label", "source_sha", "view_sha", "state",
             "attempts", "grades", "worker", "created_at", "started_at", "finished_at",
             "verdict", "error", "not_before")
# What each older version lacks, in order (a store is upgraded in place when opened).
_UPGRADES = {1: ("ALTER TABLE jobs ADD COLUMN not_before REAL NOT NULL DEFAULT 0",)}



class BestChanged(Exception):
    """An accepted candidate was graded against a best that another job replaced meanwhile:
    it must be graded again against the new one (two accepts never both pass one old best)."""


@dataclass(frozen=True)
class TokenRow:
    id: str
    name: str
    role: str
    sha256: str
    submit_per_min: float
    max_active: int
    max_per_day: int
    created_at: float
    revoked: bool


@dataclass(frozen=True)
class JobRow:
    """A job without its source and report (those are read on their own)."""

    id: str
    token_id: str
    task: str
    mode: str
    label: str
    source_sha: str
    view_sha: str
    state: str
    attempts: int
    grades: int
    worker: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    verdict: str | None
    error: str | None
    not_before: float = 0.0  # a re-queued job is not claimed before this time (epoch s)

    def public(self) -> dict[str, Any]:
        """What the job's owner may read about it (no token id, no view key hash)."""
        keep = ("id", "task", "mode", "label", "source_sha", "state", "attempts",
                "created_at", "started_at", "finished_at", "verdict", "error", "not_before")
        return {k: getattr(self, k) for k in keep}


@dataclass(frozen=True)
class Claimed:
    """A job a worker claimed: what it needs to grade it."""

    job: JobRow
    source: str
    attempt: int


class Store:
    """One store: an SQLite file (path) or a PostgreSQL database (``postgresql://`` URL),
    one connection per thread."""

    def __init__(self, target: str | Path):
        self.db: Database = open_database(target)
        self.where = "the PostgreSQL store" if is_url(target) else str(target)
        names = self.db.tables()
        if names and "schema_version" not in names:
            raise StoreError(f"{self.where} is a {self.db.name} database but not a kgrader "
                             "service store")
        if not names:
            try:
                with self.db.tx() as c:
                    for stmt in self.db.ddl(_TABLES):
                        c.execute(stmt)
                    c.execute("INSERT INTO schema_version (version) VALUES (?)",
                              (SCHEMA_VERSION,))
            except Exception:  # another process created it first: check what it made
                if "schema_version" not in self.db.tables():
                    raise
        row = self.db.conn().execute("SELECT MAX(version) FROM schema_version").fetchone()
        if row is not None and row[0] in _UPGRADES:
            row = self._upgrade(row[0])
        if row is None or row[0] != SCHEMA_VERSION:
            raise StoreError(f"{self.where} has service store version {row and row[0]!r}; "
                             f"this kgrader reads version {SCHEMA_VERSION}")

    def _upgrade(self, version: int) -> Any:
        """Bring an older store to :data:`SCHEMA_VERSION` in one transaction (a second
        server opening it at once finds it upgraded, or fails and re-reads it)."""
        try:
            with self.db.tx() as c:
                if c.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == version:
                    for v in range(version, SCHEMA_VERSION):
                        for stmt in _UPGRADES[v]:
                            c.execute(self.db.ddl(stmt)[0])
                    c.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        except Exception as e:
            raise StoreError(f"{self.where}: could not upgrade the service store from version "
                             f"{version} to {SCHEMA_VERSION}: {e}") from e
        return self.db.conn().execute("SELECT MAX(version) FROM schema_version").fetchone()

    def _conn(self) -> Conn:
        return self.db.conn()

    @contextmanager
    def _tx(self) -> Iterator[Conn]:
        with self.db.tx() as c:
            yield c

    # --- tokens -----------------------------------------------------------------------
    def add_token(self, row: TokenRow) -> None:
        with self._tx() as c:
            c.execute("INSERT INTO tokens VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      (row.id, row.name, row.role, row.sha256, row.submit_per_min,
                       row.max_active, row.max_per_day, row.created_at, int(row.revoked)))

    def token(self, token_id: str) -> TokenRow | None:
        r = self._conn().execute("SELECT * FROM tokens WHERE id = ?", (token_id,)).fetchone()
        return None if r is None else _token(r)

    def tokens(self) -> list[TokenRow]:
        rows = self._conn().execute("SELECT * FROM tokens ORDER BY created_at").fetchall()
        return [_token(r) for r in rows]

    def revoke_token(self, token_id: str) -> bool:
        with self._tx() as c:
            return c.execute("UPDATE tokens SET revoked = 1 WHERE id = ?", (token_id,)).rowcount == 1

    # --- jobs -------------------------------------------------------------------------
    def submit(self, *, token_id: str, task: str, mode: str, label: str, source: str,
               source_sha: str, view_sha: str, max_active: int, max_per_day: int,
               now: float | None = None) -> JobRow | str:
        """Queue a job, or say which quota refuses it (``"max_active"``/``"max_per_day"``).
        The quota check and the insert are one transaction: concurrent submissions of one
        token cannot both pass a quota that has room for one."""
        now = time.time() if now is None else now
        job_id = uuid.uuid4().hex
        with self._tx() as c:
            self.db.lock_token(c, token_id)
            active = c.execute("SELECT COUNT(*) FROM jobs WHERE token_id = ? AND state IN "
                               "('queued', 'running')", (token_id,)).fetchone()[0]
            if active >= max_active:
                return "max_active"
            day = c.execute("SELECT COUNT(*) FROM jobs WHERE token_id = ? AND created_at > ?",
                            (token_id, now - 86400)).fetchone()[0]
            if day >= max_per_day:
                return "max_per_day"
            c.execute("INSERT INTO jobs (id, token_id, task, mode, label, source, source_sha, "
                      "view_sha, state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?)",
                      (job_id, token_id, task, mode, label, source, source_sha, view_sha, now))
            _event(c, job_id, "queued", {"task": task, "mode": mode}, now)
        job = self.job(job_id)
        assert job is not None
        return job

    def job(self, job_id: str) -> JobRow | None:
        r = self._conn().execute(f"SELECT {', '.join(_JOB_COLS)} FROM jobs WHERE id = ?",
                                 (job_id,)).fetchone()
        return None if r is None else JobRow(*r)

    def jobs(self, token_id: str | None = None, limit: int = 100) -> list[JobRow]:
        where, args = ("WHERE token_id = ?", (token_id,)) if token_id else ("", ())
        rows = self._conn().execute(f"SELECT {', '.join(_JOB_COLS)} FROM jobs {where} "
                                    "ORDER BY seq DESC LIMIT ?", (*args, limit)).fetchall()
        return [JobRow(*r) for r in rows]

    def finished(self, mode: str) -> list[JobRow]:
        """The ``done`` jobs of ``mode``, oldest first."""
        rows = self._conn().execute(f"SELECT {', '.join(_JOB_COLS)} FROM jobs WHERE mode = ? "
                                    "AND state = 'done' ORDER BY seq", (mode,)).fetchall()
        return [JobRow(*r) for r in rows]

    def of_mode(self, mode: str, states: tuple[str, ...] = STATES) -> list[JobRow]:
        """The jobs of ``mode`` in ``states``, oldest first (the live board's pending rows
        and re-runs)."""
        marks = ", ".join("?" for _ in states)
        rows = self._conn().execute(f"SELECT {', '.join(_JOB_COLS)} FROM jobs WHERE mode = ? "
                                    f"AND state IN ({marks}) ORDER BY seq",
                                    (mode, *states)).fetchall()
        return [JobRow(*r) for r in rows]

    def source(self, job_id: str) -> str | None:
        """A job's source (a re-run grades the same text; a replay too)."""
        r = self._conn().execute("SELECT source FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if r is None else str(r[0])

    def report_json(self, job_id: str) -> str | None:
        r = self._conn().execute("SELECT report_json FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if r is None else r[0]

    def claim(self, worker: str, now: float | None = None) -> Claimed | None:
        """The oldest queued job whose backoff is over, now ``running`` under ``worker``;
        None when there is none."""
        now = time.time() if now is None else now
        with self._tx() as c:
            r = c.execute("SELECT id, source, attempts FROM jobs WHERE state = 'queued' "
                          "AND not_before <= ? ORDER BY seq LIMIT 1" + self.db.claim_suffix,
                          (now,)).fetchone()
            if r is None:
                return None
            attempt = r[2] + 1
            c.execute("UPDATE jobs SET state = 'running', worker = ?, started_at = ?, "
                      "attempts = ? WHERE id = ? AND state = 'queued'", (worker, now, attempt, r[0]))
            _event(c, r[0], "running", {"worker": worker, "attempt": attempt}, now)
        job = self.job(r[0])
        assert job is not None
        return Claimed(job, r[1], attempt)

    def finish(self, job_id: str, attempt: int, *, state: str, verdict: str | None,
               report_json: str | None, error: str | None,
               best_source: str | None = None, worker: str | None = None,
               best_was: str = "") -> bool:
        """Move a running job to ``done``/``failed`` once; False when it was not running
        under ``attempt`` (then nothing changes). ``best_source``: the job's candidate
        became its task's current best (an accepted ``accept`` job), in the same
        transaction, provided the best is still the one it was graded against
        (``best_was``: that best's job id, "" for none); else :class:`BestChanged` and
        nothing changes. ``worker``: who graded it, when known only now (a Ray node)."""
        if state not in ("done", "failed"):
            raise ValueError(f"not a final state: {state}")
        now = time.time()
        with self._tx() as c:
            if best_source is not None:
                task = c.execute("SELECT task FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]
                self.db.lock_key(c, "best:" + task)
                r = c.execute("SELECT job_id FROM bests WHERE task = ?", (task,)).fetchone()
                if (r[0] if r else "") != best_was:
                    raise BestChanged(f"the best of {task} is now {r[0] if r else 'none'}, "
                                      f"not {best_was or 'none'}")
            cur = c.execute("UPDATE jobs SET state = ?, verdict = ?, report_json = ?, error = ?, "
                            "finished_at = ?, grades = grades + ?, worker = COALESCE(?, worker) "
                            "WHERE id = ? AND state = 'running' AND attempts = ?",
                            (state, verdict, report_json, error, now, int(state == "done"),
                             worker, job_id, attempt))
            if cur.rowcount != 1:
                return False
            if best_source is not None:
                c.execute("INSERT INTO bests (task, job_id, source, at) VALUES (?, ?, ?, ?) "
                          "ON CONFLICT (task) DO UPDATE SET job_id = excluded.job_id, "
                          "source = excluded.source, at = excluded.at",
                          (task, job_id, best_source, now))
            _event(c, job_id, state, {"verdict": verdict, "error": error}, now)
        return True

    def requeue(self, job_id: str, attempt: int, why: str, delay_s: float = 0.0) -> bool:
        """Put a running job back in the queue (an infrastructure fault to retry), to be
        claimed no sooner than ``delay_s`` from now."""
        now = time.time()
        with self._tx() as c:
            cur = c.execute("UPDATE jobs SET state = 'queued', worker = NULL, not_before = ? "
                            "WHERE id = ? AND state = 'running' AND attempts = ?",
                            (now + max(delay_s, 0.0), job_id, attempt))
            if cur.rowcount == 1:
                _event(c, job_id, "requeued", {"why": why[:500], "delay_s": round(delay_s, 1)},
                       now)
            return cur.rowcount == 1

    def cancel(self, job_id: str, why: str) -> tuple[str, bool]:
        """Cancel a ``queued`` or ``running`` job: ``(its state before, whether this call
        cancelled it)``; a final job is left as it is. A running job's grade, when it comes,
        is not recorded (:meth:`finish` only moves a ``running`` job)."""
        now = time.time()
        with self._tx() as c:
            r = c.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if r is None:
                raise KeyError(job_id)
            if r[0] in FINAL:
                return str(r[0]), False
            cur = c.execute("UPDATE jobs SET state = 'cancelled', finished_at = ?, error = ? "
                            "WHERE id = ? AND state = ?", (now, why[:500], job_id, r[0]))
            if cur.rowcount != 1:
                return str(r[0]), False
            _event(c, job_id, "cancelled", {"was": r[0], "why": why[:500]}, now)
        return str(r[0]), True

    def recover(self) -> list[str]:
        """At start-up: every job a killed server left ``running`` goes back to the queue."""
        with self._tx() as c:
            ids = [r[0] for r in c.execute("SELECT id FROM jobs WHERE state = 'running'")
                   .fetchall()]
            c.execute("UPDATE jobs SET state = 'queued', worker = NULL, not_before = 0 "
                      "WHERE state = 'running'")
            for i in ids:
                _event(c, i, "requeued", {"why": "the server restarted while it ran"}, time.time())
        return ids

    def counts(self) -> dict[str, int]:
        rows = self._conn().execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall()
        return {s: 0 for s in STATES} | {r[0]: int(r[1]) for r in rows}

    def stats(self) -> dict[str, Any]:
        """Counts per state, and the claims (attempts) and recorded grades in total."""
        r = self._conn().execute("SELECT COALESCE(SUM(attempts), 0), COALESCE(SUM(grades), 0), "
                                 "COALESCE(MAX(grades), 0) FROM jobs").fetchone()
        return {"jobs": self.counts(), "claims": int(r[0]), "grades": int(r[1]),
                "max_grades_per_job": int(r[2])}

    def best(self, task: str) -> str | None:
        entry = self.best_entry(task)
        return None if entry is None else entry[1]

    def best_entry(self, task: str) -> tuple[str, str] | None:
        """The task's current best: ``(job id, source)``, or None."""
        r = self._conn().execute("SELECT job_id, source FROM bests WHERE task = ?",
                                 (task,)).fetchone()
        return None if r is None else (str(r[0]), str(r[1]))

    # --- events -----------------------------------------------------------------------
    def add_step(self, job_id: str, attempt: int, data: dict[str, Any]) -> bool:
        """A ``step`` event of a running job (the judge's live steps, for its watchers);
        recorded only while the job runs under ``attempt``, so a stopped attempt's late
        steps never follow the job's final event."""
        with self._tx() as c:
            cur = c.execute("INSERT INTO events (job_id, at, kind, data) SELECT ?, ?, 'step', ? "
                            "WHERE EXISTS (SELECT 1 FROM jobs WHERE id = ? AND state = 'running' "
                            "AND attempts = ?)",
                            (job_id, time.time(), json.dumps(data), job_id, attempt))
            return bool(cur.rowcount)

    def events(self, job_id: str, after: int = 0) -> list[tuple[int, float, str, dict[str, Any]]]:
        rows = self._conn().execute("SELECT seq, at, kind, data FROM events WHERE job_id = ? "
                                    "AND seq > ? ORDER BY seq", (job_id, after)).fetchall()
        return [(int(r[0]), float(r[1]), str(r[2]), json.loads(r[3])) for r in rows]


def _token(r: tuple[Any, ...]) -> TokenRow:
    return TokenRow(id=r[0], name=r[1], role=r[2], sha256=r[3], submit_per_min=float(r[4]),
                    max_active=int(r[5]), max_per_day=int(r[6]), created_at=float(r[7]),
                    revoked=bool(r[8]))


def _event(c: Conn, job_id: str, kind: str, data: dict[str, Any], at: float) -> None:
    c.execute("INSERT INTO events (job_id, at, kind, data) VALUES (?, ?, ?, ?)",
              (job_id, at, kind, json.dumps(data)))
