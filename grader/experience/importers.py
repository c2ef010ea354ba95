"""``kgrader experience add``: import finished evaluations from records or a leaderboard state.

* A **records folder** (:mod:`grader.records`): every ``evals/<ts>-<id>/`` that holds a
  valid ``report.json`` is one attempt, with its ``task.json`` and ``candidate.py``; the
  acceptance decision comes from ``trajectory.jsonl``. A folder without a report (the
  evaluation never finished) is skipped and counted. Folders and files are read without
  following symlinks, and each file is read up to a cap.
* A **leaderboard state** (:mod:`grader.leaderboard.state`): every evaluation row except
  the reference checks; its stored report (secret seeds already redacted) is the verdict.
  The state holds no source, so those attempts have none.

Attempts already in the store (same key) are counted as duplicates, not added twice.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from grader.experience.extract import (
    attempt_from_leaderboard,
    attempt_from_report,
    load_json,
    parse_report,
)
from grader.experience.model import MAX_SOURCE_BYTES, ExperienceError, Origin
from grader.experience.store import ExperienceStore
from grader.grading.redact import ShapeFacts
from grader.leaderboard.render import SHAPES_META
from grader.leaderboard.state import State
from grader.records import EVALS, REPORT, TOOL_CALLS, read_trajectory

__all__ = ["ImportSummary", "import_leaderboard_state", "import_path", "import_records"]

MAX_REPORT_BYTES = 16 * 1024 * 1024
_SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass
class ImportSummary:
    """What one import did."""

    source: str
    kind: str
    added: int = 0
    duplicates: int = 0
    skipped: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        return {"source": self.source, "kind": self.kind, "added": self.added,
                "duplicates": self.duplicates, "skipped": self.skipped}


def _read_capped(path: Path, cap: int) -> bytes | None:
    """A regular file's first ``cap`` bytes, never through a symlink; None when absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(cap)
    finally:
        os.close(fd)


def import_records(store: ExperienceStore, root: Path) -> ImportSummary:
    """Import every finished evaluation under ``root/evals``."""
    summary = ImportSummary(str(root), "records")
    evals = root / EVALS
    if not evals.is_dir() or evals.is_symlink():
        raise ExperienceError(f"{root} is not a records folder (no {EVALS}/ folder)")
    # A workspace's records (made by accept_candidate) carry a tool-call log; `kgrader run
    # --records` folders do not.
    origin: Origin = "tool" if (root / TOOL_CALLS).is_file() else "run"
    decided = {e.folder: e.accepted for e in read_trajectory(root)}
    for folder in sorted(evals.iterdir()):
        if folder.name.startswith(".") or folder.is_symlink() or not folder.is_dir():
            continue
        rel = f"{EVALS}/{folder.name}"
        raw = _read_capped(folder / REPORT, MAX_REPORT_BYTES)
        report = parse_report(raw) if raw is not None else None
        if report is None:
            summary.skipped.append(f"{rel}: no valid {REPORT} (unfinished or damaged)")
            continue
        src = _read_capped(folder / "candidate.py", MAX_SOURCE_BYTES + 1)
        task_raw = _read_capped(folder / "task.json", MAX_REPORT_BYTES)
        task = load_json(task_raw) if task_raw is not None else None
        attempt = attempt_from_report(
            report, origin=origin, task=task if isinstance(task, dict) else None,
            source=src.decode("utf-8", "replace") if src is not None else None,
            accepted=decided.get(rel), origin_ref=f"imported from {folder}")
        if store.add(attempt):
            summary.added += 1
        else:
            summary.duplicates += 1
    return summary


def import_leaderboard_state(store: ExperienceStore, path: Path) -> ImportSummary:
    """Import every finished submission evaluation of a leaderboard state file."""
    summary = ImportSummary(str(path), "leaderboard")
    with State.open(path, create=False) as state:
        rows = state.evaluations()
        meta = state.meta(SHAPES_META, {})
    # The tasks' shape facts, kept by the run: the same redaction as the live hook's.
    facts = {k: ShapeFacts.from_json(v) for k, v in meta.items()} if isinstance(meta, dict) else {}
    for row in rows:
        if row.round == "reference":
            continue  # the task's own reference, not an attempt at the task
        attempt = attempt_from_leaderboard(row, source=None, task=None,
                                           shape_facts=facts.get(row.task, ShapeFacts(None)))
        if store.add(attempt):
            summary.added += 1
        else:
            summary.duplicates += 1
    return summary


def import_path(store: ExperienceStore, path: Path) -> ImportSummary:
    """A records folder or a leaderboard state file, told apart by what ``path`` is."""
    if path.is_dir():
        return import_records(store, path)
    if not path.exists():
        raise ExperienceError(f"nothing to import at {path}: no such file or folder")
    head = _read_capped(path, len(_SQLITE_MAGIC))
    if head == _SQLITE_MAGIC:
        return import_leaderboard_state(store, path)
    raise ExperienceError(f"{path} is neither a records folder nor a leaderboard state file")
