"""The experience store: an embedded SQLite file of every finished evaluation.

Where it lives: the ``path`` argument, else ``$KGRADER_EXPERIENCE``, else
``~/.cache/kgrader/experience.sqlite``. ``KGRADER_EXPERIENCE=off`` switches the automatic
recording off (:mod:`grader.experience.hooks`); commands then need ``--db``.

Stored source is data: it is written and read as text and never executed, imported or
handed to anything that could. Every write is one ``BEGIN IMMEDIATE`` transaction, so
concurrent writers (several ``kgrader run`` processes, leaderboard workers, tools) queue
on SQLite's lock (WAL, busy timeout) instead of failing or interleaving.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grader.experience.model import (
    MAX_DIAGNOSTICS_BYTES,
    Attempt,
    ErrorItem,
    ExperienceError,
    Shape,
    cap_text,
)
from grader.experience.query import Query, build_select
from grader.experience.schema import SCHEMA_VERSION, connect, transaction

__all__ = ["ENV", "ExperienceStore", "Hit", "default_path", "recording_enabled"]

ENV = "KGRADER_EXPERIENCE"
_OFF = ("off", "0", "none", "disabled")
_COLUMNS = ("key", "created_at", "stored_at", "origin", "origin_ref", "task", "tags", "dtypes",
            "device", "hardware", "hardware_key", "candidate_sha256", "source", "source_truncated",
            "stage", "ok", "accepted", "first_code", "messages", "warnings", "median_ms", "mean_ms",
            "min_ms", "bandwidth_gbps", "tflops", "speedup", "improvement_fraction",
            "min_improvement_fraction", "roofline_fraction", "bottleneck", "diagnostics", "figures")


def recording_enabled() -> bool:
    """False when ``$KGRADER_EXPERIENCE`` switches automatic recording off."""
    return os.environ.get(ENV, "").strip().lower() not in _OFF


def default_path() -> Path:
    """``$KGRADER_EXPERIENCE`` or ``~/.cache/kgrader/experience.sqlite``."""
    env = os.environ.get(ENV, "").strip()
    if env.lower() in _OFF:
        raise ExperienceError(f"the experience store is switched off (${ENV}={env}); pass --db PATH")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kgrader" / "experience.sqlite"


@dataclass(frozen=True)
class Hit:
    """One attempt returned by a query, with its row id, text rank and storage time."""

    id: int
    attempt: Attempt
    rank: float
    stored_at: str


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _messages(a: Attempt) -> str:
    lines = [f"{e.stage} {e.code}: {e.message}" for e in a.errors]
    return "\n".join(lines + [f"warning: {w}" for w in a.warnings])


@contextmanager
def _db_errors(path: Path) -> Iterator[None]:
    """SQLite and row-decoding failures of an opened store become one typed error."""
    try:
        yield
    except sqlite3.DatabaseError as e:
        raise ExperienceError(f"experience store {path}: SQLite said: {e}") from None
    except (ValueError, TypeError, KeyError) as e:
        raise ExperienceError(f"experience store {path} holds a malformed row ({e})") from None


def _bool(v: Any) -> bool | None:
    return None if v is None else bool(v)


class ExperienceStore:
    """An open store. :meth:`open` it; close with :meth:`close` or ``with``."""

    def __init__(self, conn: sqlite3.Connection, path: Path, text_index: str, fts: bool) -> None:
        self.conn, self.path, self.text_index, self.fts = conn, path, text_index, fts

    @classmethod
    def open(cls, path: str | Path | None = None, *, create: bool = True,
             use_fts: bool | None = None) -> ExperienceStore:
        """Open the store at ``path`` (default: :func:`default_path`); see :func:`schema.connect`."""
        p = Path(path).expanduser() if path is not None else default_path()
        opened = connect(p, create=create, use_fts=use_fts)
        return cls(opened.conn, p, opened.text_index, opened.fts)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> ExperienceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ----------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self.text_index == "fts5" and not self.fts:
            raise ExperienceError(f"{self.path} has an FTS5 text index, but this Python's SQLite "
                                  "has no FTS5 module: it cannot be written from here")

    def add(self, attempt: Attempt) -> bool:
        """Store one attempt (capped first); False when its key is already stored."""
        self._check_writable()
        a = attempt.capped()
        row = {
            "key": a.key, "created_at": a.created_at, "stored_at": _now(), "origin": a.origin,
            "origin_ref": a.origin_ref, "task": a.task, "tags": json.dumps(list(a.tags)),
            "dtypes": json.dumps(list(a.dtypes)), "device": a.device, "hardware": a.hardware,
            "hardware_key": a.hardware_key, "candidate_sha256": a.candidate_sha256,
            "source": a.source, "source_truncated": int(a.source_truncated), "stage": a.stage,
            "ok": int(a.ok), "accepted": None if a.accepted is None else int(a.accepted),
            "first_code": a.errors[0].code if a.errors else None, "messages": _messages(a),
            "warnings": json.dumps(list(a.warnings)), "median_ms": a.median_ms,
            "mean_ms": a.mean_ms, "min_ms": a.min_ms, "bandwidth_gbps": a.bandwidth_gbps,
            "tflops": a.tflops, "speedup": a.speedup, "improvement_fraction": a.improvement_fraction,
            "min_improvement_fraction": a.min_improvement_fraction,
            "roofline_fraction": a.roofline_fraction, "bottleneck": a.bottleneck,
            "diagnostics": a.diagnostics, "figures": json.dumps(a.figures, default=str),
        }
        marks = ", ".join(f":{c}" for c in _COLUMNS)
        with _db_errors(self.path), transaction(self.conn):
            cur = self.conn.execute(
                f"INSERT OR IGNORE INTO attempts ({', '.join(_COLUMNS)}) VALUES ({marks})", row)
            if cur.rowcount != 1:
                return False
            aid = cur.lastrowid
            self.conn.executemany("INSERT OR IGNORE INTO attempt_tags VALUES (?, ?)",
                                  [(aid, t) for t in a.tags])
            self.conn.executemany("INSERT INTO attempt_errors VALUES (?, ?, ?, ?, ?, ?)",
                                  [(aid, i, e.stage, e.code, e.message, e.line)
                                   for i, e in enumerate(a.errors)])
            self.conn.executemany("INSERT OR IGNORE INTO attempt_dims VALUES (?, ?, ?, ?, ?)",
                                  [(aid, i, s.kind, n, int(v)) for i, s in enumerate(a.shapes)
                                   for n, v in s.dims.items()])
            if self.fts:
                self.conn.execute("INSERT INTO attempts_fts (rowid, messages, diagnostics, source) "
                                  "VALUES (?, ?, ?, ?)",
                                  (aid, row["messages"], a.diagnostics, a.source or ""))
        return True

    def add_diagnostics(self, key: str, text: str) -> bool:
        """Append ``text`` to a stored attempt's diagnostics (e.g. a later profiler run).

        The result is capped like any stored diagnostics; False when no attempt has ``key``.
        """
        self._check_writable()
        with _db_errors(self.path), transaction(self.conn):
            row = self.conn.execute("SELECT id, diagnostics FROM attempts WHERE key = ?", (key,)).fetchone()
            if row is None:
                return False
            merged = cap_text("\n".join(t for t in (row[1], text) if t), MAX_DIAGNOSTICS_BYTES)[0]
            self.conn.execute("UPDATE attempts SET diagnostics = ? WHERE id = ?", (merged, row[0]))
            if self.fts:
                self.conn.execute("UPDATE attempts_fts SET diagnostics = ? WHERE rowid = ?", (merged, row[0]))
        return True

    # --- reading ----------------------------------------------------------------------
    def query(self, q: Query) -> list[Hit]:
        """Attempts matching ``q``, best first (see :mod:`grader.experience.query`)."""
        sql, params = build_select(q, self.fts)
        with _db_errors(self.path):
            ranked = self.conn.execute(sql, params).fetchall()
            found = self._load([int(r[0]) for r in ranked])
        return [Hit(aid, found[aid][0], float(rank), found[aid][1]) for aid, rank in ranked]

    def _load(self, ids: list[int]) -> dict[int, tuple[Attempt, str]]:
        if not ids:
            return {}
        marks = ", ".join("?" * len(ids))
        cols = ", ".join(("id", *_COLUMNS))
        rows = self.conn.execute(f"SELECT {cols} FROM attempts WHERE id IN ({marks})", ids).fetchall()
        errors: dict[int, list[ErrorItem]] = {i: [] for i in ids}
        for r in self.conn.execute("SELECT attempt_id, stage, code, message, line FROM attempt_errors "
                                   f"WHERE attempt_id IN ({marks}) ORDER BY attempt_id, idx", ids):
            errors[r[0]].append(ErrorItem(r[1], r[2], r[3], r[4]))
        shapes: dict[int, dict[int, Shape]] = {i: {} for i in ids}
        for r in self.conn.execute("SELECT attempt_id, shape, kind, name, value FROM attempt_dims "
                                   f"WHERE attempt_id IN ({marks}) ORDER BY attempt_id, shape", ids):
            shapes[r[0]].setdefault(r[1], Shape(r[2], {})).dims[r[3]] = int(r[4])
        out = {}
        for r in rows:
            d = dict(zip(("id", *_COLUMNS), r, strict=True))
            aid = int(d.pop("id"))
            stored_at = d.pop("stored_at")
            d.pop("messages")
            d.pop("first_code")
            d.update(tags=tuple(json.loads(d["tags"])), dtypes=tuple(json.loads(d["dtypes"])),
                     warnings=tuple(json.loads(d["warnings"])), figures=json.loads(d["figures"]),
                     ok=bool(d["ok"]), accepted=_bool(d["accepted"]),
                     source_truncated=bool(d["source_truncated"]), errors=tuple(errors[aid]),
                     shapes=tuple(s for _, s in sorted(shapes[aid].items())))
            out[aid] = (Attempt(**d), stored_at)
        return out

    def count(self) -> int:
        with _db_errors(self.path):
            return int(self.conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0])

    def stats(self) -> dict[str, Any]:
        """Counts for ``kgrader experience stats``."""
        with _db_errors(self.path):
            return self._stats()

    def _pairs(self, sql: str) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.conn.execute(sql)}

    def _stats(self) -> dict[str, Any]:
        pairs = self._pairs
        total = self.count()
        passed = int(self.conn.execute("SELECT COUNT(*) FROM attempts WHERE ok = 1").fetchone()[0])
        return {
            "path": str(self.path), "schema_version": SCHEMA_VERSION, "text_index": self.text_index,
            "text_search": "fts5" if self.fts else "like", "attempts": total, "passed": passed,
            "failed": total - passed,
            "by_origin": pairs("SELECT origin, COUNT(*) FROM attempts GROUP BY origin ORDER BY 2 DESC"),
            "by_task": pairs("SELECT task, COUNT(*) FROM attempts GROUP BY task "
                             "ORDER BY 2 DESC, 1 LIMIT 50"),
            "by_tag": pairs("SELECT tag, COUNT(*) FROM attempt_tags GROUP BY tag "
                            "ORDER BY 2 DESC, 1 LIMIT 50"),
            "failed_by_stage": pairs("SELECT COALESCE(stage, '(none)'), COUNT(*) FROM attempts "
                                     "WHERE ok = 0 GROUP BY stage ORDER BY 2 DESC"),
            "by_error_code": pairs("SELECT code, COUNT(*) FROM attempt_errors GROUP BY code "
                                   "ORDER BY 2 DESC, 1 LIMIT 50"),
            "by_hardware": pairs("SELECT COALESCE(hardware, '(unknown)'), COUNT(*) FROM attempts "
                                 "GROUP BY hardware ORDER BY 2 DESC LIMIT 20"),
        }
