"""Evaluation records: one folder per evaluation, the trajectory, tool calls and best.py.

Layout of a records root ``DIR``::

    DIR/.lock                  filelock.FileLock; every writer of the files below holds it
    DIR/evals/<ts>-<id>/       task.json, reference.py, candidate.py, current.py (if any),
                               report.json (once finished)
    DIR/trajectory.jsonl       one line per acceptance decision (accepted or not)
    DIR/tool-calls.jsonl       every agent tool call with its full return
    DIR/best.py                the last accepted candidate
    DIR/best.py.tmp            only while (or after a crash while) best.py is replaced

**Consistency**, as :func:`check_consistency` checks it. Let a *line* be a complete line
of ``trajectory.jsonl`` (ending in ``\\n``); a torn final line, left by a crash during its
append, is no line: readers ignore it and the next writer cuts it off. Let ``A`` be the
last line with ``accepted: true`` and ``P`` the accepted line before it. The records are
consistent when every line parses, names a folder inside ``DIR/evals`` whose
``candidate.py`` has the line's sha256 and whose ``report.json`` is a valid report, and
best.py is in one of two states:

1. **settled**: ``sha256(best.py) == A.candidate_sha256``, or there is no ``A`` and no
   best.py;
2. **committed, not yet installed**: ``best.py.tmp`` exists with ``A``'s sha256 and
   best.py is ``P``'s candidate (or absent when ``A`` is the first acceptance).

No order of two separate atomic steps (append a line, rename a file) can make state 1
hold at every instant: a kill between them always leaves one file ahead of the other.
So the trajectory is the write-ahead log and the single commit point, and best.py is the
state it describes. The write order in :meth:`Records.finish` is:

a. the evaluation folder is complete and fsynced (it was built in a hidden folder and
   renamed into place, so a folder is either whole or absent; report.json is written
   atomically);
b. ``best.py.tmp`` is written and fsynced (a crash here leaves state 1 and a stray
   temp file, which the next writer deletes);
c. the trajectory line is appended and fsynced — **the commit point** (a crash during
   it leaves a torn line, that is, no commit);
d. ``best.py.tmp`` is renamed onto ``best.py`` and the folder is fsynced (a crash
   between c and d leaves state 2).

Every writer takes the lock and first calls :meth:`Records.recover`, which rolls state 2
forward (the rename in d is idempotent), deletes a stray temp file and cuts a torn line
off; :meth:`Records.best_source` answers with the committed best in either state. The
same lock serialises all writers, and the kernel drops it when a holder is killed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import filelock
from pydantic import ValidationError

from grader.durable import (
    append_line,
    atomic_write,
    cut_torn_tail,
    fsync_dir,
    write_fsynced,
)
from grader.errors import TaskError, UsageError
from grader.report.model import Report

__all__ = [
    "Records",
    "TrajectoryEntry",
    "check_consistency",
    "read_trajectory",
    "sha256_text",
]

TRAJECTORY = "trajectory.jsonl"
TOOL_CALLS = "tool-calls.jsonl"
BEST = "best.py"
BEST_TMP = "best.py.tmp"
LOCK = ".lock"
EVALS = "evals"
REPORT = "report.json"
_LINE_KEYS = ("time", "task", "candidate_sha256", "accepted", "improvement_fraction", "rule", "folder")


def sha256_text(text: str) -> str:
    """Hex sha256 of ``text`` encoded as UTF-8 (how candidate files are written)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class TrajectoryEntry:
    """One complete line of trajectory.jsonl."""

    time: str
    task: str | None
    candidate_sha256: str
    accepted: bool
    improvement_fraction: float | None
    rule: str | None
    folder: str

    def to_json(self) -> dict[str, Any]:
        """The line as written (keys in the documented order)."""
        return {k: getattr(self, k) for k in _LINE_KEYS}


def _parse_lines(root: Path) -> tuple[list[TrajectoryEntry], list[str]]:
    path = Path(root) / TRAJECTORY
    if not path.exists():
        return [], []
    raw = path.read_bytes()
    chunks = raw.split(b"\n")
    # The piece after the last newline is a torn append (or empty): not a line.
    complete = chunks[:-1]
    entries: list[TrajectoryEntry] = []
    problems: list[str] = []
    for no, chunk in enumerate(complete, start=1):
        try:
            obj = json.loads(chunk.decode("utf-8"))
            if not isinstance(obj, dict) or set(obj) != set(_LINE_KEYS):
                raise ValueError(f"keys {sorted(obj) if isinstance(obj, dict) else type(obj).__name__}")
            if not isinstance(obj["accepted"], bool) or not isinstance(obj["candidate_sha256"], str):
                raise ValueError("bad accepted or candidate_sha256")
            entries.append(TrajectoryEntry(**obj))
        except (UnicodeDecodeError, ValueError, TypeError) as e:
            problems.append(f"{TRAJECTORY}:{no}: malformed line ({e})")
    return entries, problems


def read_trajectory(root: str | Path) -> list[TrajectoryEntry]:
    """Every complete, well-formed line of ``root/trajectory.jsonl``, in order.

    A torn final line is ignored; a malformed complete line is skipped here and reported
    by :func:`check_consistency`.
    """
    return _parse_lines(Path(root))[0]


def _folder_problems(root: Path, no: int, e: TrajectoryEntry) -> list[str]:
    where = f"{TRAJECTORY}:{no}"
    folder = (root / e.folder).resolve()
    if Path(e.folder).is_absolute() or not folder.is_relative_to((root / EVALS).resolve()):
        return [f"{where}: folder {e.folder!r} is not inside {EVALS}/"]
    cand = folder / "candidate.py"
    if not cand.is_file():
        return [f"{where}: {e.folder}/candidate.py missing"]
    out = []
    if _sha256_file(cand) != e.candidate_sha256:
        out.append(f"{where}: {e.folder}/candidate.py sha256 differs from the line")
    try:
        Report.model_validate_json((folder / REPORT).read_bytes())
    except FileNotFoundError:
        out.append(f"{where}: {e.folder}/{REPORT} missing")
    except ValidationError as err:
        out.append(f"{where}: {e.folder}/{REPORT} invalid ({err.error_count()} errors)")
    return out


def check_consistency(root: str | Path) -> list[str]:
    """Problems that break the invariant in the module docstring; empty when consistent."""
    base = Path(root)
    if not base.is_dir():
        return [f"records folder {base} does not exist"]
    entries, problems = _parse_lines(base)
    for no, e in enumerate(entries, start=1):
        problems.extend(_folder_problems(base, no, e))
    accepted = [e for e in entries if e.accepted]
    want = accepted[-1].candidate_sha256 if accepted else None
    prev = accepted[-2].candidate_sha256 if len(accepted) > 1 else None
    best, tmp = base / BEST, base / BEST_TMP
    have = _sha256_file(best) if best.is_file() else None
    tmp_sha = _sha256_file(tmp) if tmp.is_file() else None
    if have == want:
        return problems  # state 1, settled
    if want is not None and tmp_sha == want and have == prev:
        return problems  # state 2, committed but not yet installed
    problems.append(
        f"{BEST} sha256 {have or '(absent)'} does not match the last accepted line "
        f"({want or 'none accepted'})"
        + (f"; {BEST_TMP} holds {tmp_sha}" if tmp_sha else "")
    )
    return problems


# --- writing --------------------------------------------------------------------------


class Records:
    """Writer for a records root; safe against ``kill -9`` at any moment (see module doc)."""

    def __init__(self, root: str | Path, *, lock_timeout_s: float = 60.0) -> None:
        self.root = Path(root)
        try:
            (self.root / EVALS).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"records folder {self.root} cannot be used: {e}",
                             code="bad_output_path") from None
        self._lock = filelock.FileLock(str(self.root / LOCK), timeout=lock_timeout_s)
        self.recover()

    @property
    def best_path(self) -> Path:
        """Where the current best candidate lives (it may not exist yet)."""
        return self.root / BEST

    @property
    def trajectory_path(self) -> Path:
        """The trajectory file."""
        return self.root / TRAJECTORY

    @property
    def tool_calls_path(self) -> Path:
        """The tool-call log."""
        return self.root / TOOL_CALLS

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            yield

    def recover(self) -> None:
        """Bring the files to the settled state, under the lock (re-entrant for writers).

        Cuts a torn line off both logs, installs a committed-but-not-renamed best.py
        (state 2), and deletes a temp file no line committed.
        """
        with self._locked():
            self._recover_locked()

    def _recover_locked(self) -> None:
        cut_torn_tail(self.trajectory_path)
        cut_torn_tail(self.tool_calls_path)
        tmp = self.root / BEST_TMP
        if not tmp.exists():
            return
        accepted = [e for e in read_trajectory(self.root) if e.accepted]
        if accepted and _sha256_file(tmp) == accepted[-1].candidate_sha256:
            os.replace(tmp, self.best_path)
        else:
            tmp.unlink()
        fsync_dir(self.root)

    def best_source(self) -> str | None:
        """The committed best candidate's source (state 1 or 2), or ``None``."""
        accepted = [e for e in read_trajectory(self.root) if e.accepted]
        if not accepted:
            return None
        want = accepted[-1].candidate_sha256
        for p in (self.best_path, self.root / BEST_TMP):
            with contextlib.suppress(FileNotFoundError):
                data = p.read_bytes()
                if hashlib.sha256(data).hexdigest() == want:
                    return data.decode("utf-8")
        # Both files moved under our feet (a writer was mid-rename): the folder is final.
        return (self.root / accepted[-1].folder / "candidate.py").read_text(encoding="utf-8")

    def new_evaluation(self, task_dir: str | Path, candidate_src: str, current_src: str | None) -> Path:
        """Create ``evals/<timestamp>-<id>/`` with the task, reference and sources; return it.

        The folder is built under a hidden name and renamed into place, so it is whole
        or absent. Raises :class:`TaskError` when ``task_dir`` lacks task.json or
        reference.py.
        """
        task = Path(task_dir)
        files: dict[str, bytes] = {}
        for name in ("task.json", "reference.py"):
            try:
                files[name] = (task / name).read_bytes()
            except OSError as e:
                raise TaskError(f"task folder {task} lacks a readable {name}: {e.strerror}") from None
        files["candidate.py"] = candidate_src.encode("utf-8")
        if current_src is not None:
            files["current.py"] = current_src.encode("utf-8")
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        name = f"{stamp}-{secrets.token_hex(4)}"
        evals = self.root / EVALS
        staging = evals / f".staging-{name}"
        staging.mkdir()
        for fname, data in files.items():
            write_fsynced(staging / fname, data)
        fsync_dir(staging)
        final = evals / name
        os.rename(staging, final)
        fsync_dir(evals)
        return final

    def finish(self, eval_dir: str | Path, report: Report, accepted: bool | None) -> TrajectoryEntry | None:
        """Write report.json; for a decision, log it and (if accepted) install best.py.

        ``accepted=None`` means "decide from the report": ``report.acceptance.accepted``
        when the report has an acceptance stage, else no decision was made and no
        trajectory line is written (a plain evaluation). Pass ``False`` explicitly for a
        candidate that failed before acceptance but was up for it: a rejection is a
        result and is recorded. Returns the line written, if any.
        """
        folder = Path(eval_dir)
        atomic_write(folder / REPORT, report.model_dump_json(indent=2).encode("utf-8"))
        if accepted is None:
            if report.acceptance is None:
                return None
            accepted = report.acceptance.accepted
        cand_bytes = (folder / "candidate.py").read_bytes()
        acc = report.acceptance
        entry = TrajectoryEntry(
            time=_now(),
            task=report.task if report.task is not None else self._task_name(folder),
            candidate_sha256=hashlib.sha256(cand_bytes).hexdigest(),
            accepted=accepted,
            improvement_fraction=acc.improvement_fraction if acc is not None else None,
            rule=acc.rule if acc is not None else None,
            folder=folder.resolve().relative_to(self.root.resolve()).as_posix(),
        )
        with self._locked():
            self.recover()
            if accepted:
                write_fsynced(self.root / BEST_TMP, cand_bytes)  # step b
            append_line(self.trajectory_path, entry.to_json())  # step c: commit point
            if accepted:
                os.replace(self.root / BEST_TMP, self.best_path)  # step d
                fsync_dir(self.root)
        return entry

    def log_tool_call(self, name: str, args: dict[str, Any], result: Any) -> None:
        """Append one agent tool call with its full return to tool-calls.jsonl (fsynced).

        Pydantic models are dumped as JSON; other unserialisable values as ``repr``.
        """
        line = {"time": _now(), "name": name, "args": args, "result": result}
        with self._locked():
            cut_torn_tail(self.tool_calls_path)
            append_line(self.tool_calls_path, line)

    @staticmethod
    def _task_name(folder: Path) -> str | None:
        try:
            name = json.loads((folder / "task.json").read_text(encoding="utf-8")).get("name")
        except (OSError, ValueError, AttributeError):
            return None
        return name if isinstance(name, str) else None
