"""The submission layout, and what is wrong with a submission before anything runs.

Layout (documented in docs/leaderboard.md)::

    SUBMISSIONS/
      <name>/                 one folder per submission; the folder name is the entry's name
        <task_name>.py        one file per task it enters (task_name from task.json)

Rules, each producing a message for that submission only (the others go on):

* a regular ``<task>.py`` for a task of this run is entered;
* a task without a file is *not entered*: the submission is still evaluated on the
  others, and the missing task counts as not solved in every aggregate (speed-up 0 for
  fast_p, the floor for the floored geomean), so entering fewer tasks cannot raise a score;
* anything else inside the folder (other files, sub-folders, symlinks, a misspelt task
  name) makes the submission **invalid**: nothing of it is evaluated, since a misspelt
  file would otherwise be silently dropped;
* a folder with no task file, a hidden folder, a symlinked folder: invalid / ignored;
* two submissions with the same content (same files, byte for byte) are **duplicates**:
  the first by name is evaluated once, the others are listed as duplicates of it and not
  ranked (one entry per distinct piece of work).

Names are untrusted text: they are stored as given and escaped wherever displayed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grader.errors import UsageError

MAX_FILE_BYTES = 1 << 20
MAX_NAME = 100


@dataclass
class Submission:
    """One submission folder after validation."""

    name: str
    folder: Path
    files: dict[str, Path] = field(default_factory=dict)
    file_sha: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    status: str = "valid"
    duplicate_of: str | None = None

    @property
    def content_sha(self) -> str:
        h = hashlib.sha256()
        for task in sorted(self.file_sha):
            h.update(f"{task}\0{self.file_sha[task]}\n".encode())
        return h.hexdigest()

    @property
    def message(self) -> str:
        return "; ".join(self.problems) if self.problems else "ok"


def _sha_file(p: Path) -> str | None:
    with p.open("rb") as fh:
        data = fh.read(MAX_FILE_BYTES + 1)
    return None if len(data) > MAX_FILE_BYTES else hashlib.sha256(data).hexdigest()


def _check_name(name: str) -> str | None:
    if len(name) > MAX_NAME:
        return f"name longer than {MAX_NAME} characters"
    if not name.isprintable():
        return "name holds non-printable characters"
    return None


def inspect_submission(folder: Path, tasks: Sequence[str]) -> Submission:
    """Validate one folder against the run's task names."""
    sub = Submission(name=folder.name, folder=folder)
    bad_name = _check_name(folder.name)
    if bad_name:
        sub.problems.append(bad_name)
    if folder.is_symlink():
        sub.problems.append("the submission folder is a symlink (never followed)")
        sub.status = "invalid"
        return sub
    wanted = {f"{t}.py": t for t in tasks}
    extra: list[str] = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        task = wanted.get(entry.name)
        if task is None or entry.is_symlink() or not entry.is_file():
            extra.append(entry.name + ("/" if entry.is_dir() and not entry.is_symlink() else ""))
            continue
        sha = _sha_file(entry)
        if sha is None:
            sub.problems.append(f"{entry.name} is larger than {MAX_FILE_BYTES} bytes")
            extra.append(entry.name)
            continue
        sub.files[task], sub.file_sha[task] = entry, sha
    sub.missing = [t for t in tasks if t not in sub.files]
    if extra:
        sub.problems.append(
            f"unexpected file(s) {', '.join(repr(e) for e in extra)}: a submission folder holds "
            f"only <task>.py files for the tasks of this run ({', '.join(tasks)}); nothing of "
            "this submission was evaluated")
    if not sub.files and not extra:
        sub.problems.append(f"no task file: expected one of {', '.join(sorted(wanted))}")
    if extra or not sub.files or bad_name:
        sub.status = "invalid"
    elif sub.missing:
        sub.problems.append(f"does not enter {', '.join(sub.missing)} (counted as not solved)")
    return sub


def discover(root: Path, tasks: Sequence[str]) -> tuple[list[Submission], list[str]]:
    """All submissions under ``root`` (sorted by name) and notes about the root itself."""
    if not root.is_dir():
        raise UsageError(f"submissions folder not found: {root}")
    notes: list[str] = []
    subs: list[Submission] = []
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.name.startswith("."):
            continue
        if not entry.is_dir() or entry.is_symlink():
            if entry.is_symlink():
                subs.append(inspect_submission(entry, tasks))
            else:
                notes.append(f"ignored {entry.name!r}: not a submission folder")
            continue
        subs.append(inspect_submission(entry, tasks))
    mark_duplicates(subs)
    return subs, notes


def mark_duplicates(subs: Sequence[Submission]) -> None:
    """The first valid submission with a given content is the original; later ones duplicate it."""
    first: dict[str, str] = {}
    for sub in subs:
        if sub.status != "valid":
            continue
        orig = first.setdefault(sub.content_sha, sub.name)
        if orig != sub.name:
            sub.status, sub.duplicate_of = "duplicate", orig
            sub.problems.append(f"same content as {orig!r}: evaluated once, under {orig!r}, "
                                "and not ranked twice")
