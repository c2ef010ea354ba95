"""Output paths, proven writable before any work: a report that cannot be written must not
cost a grading first; and a report that still cannot be written afterwards is not lost.

A command that writes a folder (``--out``, ``--records``, a site) or a file (``--state``,
a store, a cache) calls :func:`check_output_dir` / :func:`check_output_file` before it
grades. They do not trust permission bits (root passes every ``access`` check, and
``/proc`` or a read-only mount refuses what they allow): they create the missing folders,
write and remove a probe file in the real folder (and, for a file, create and remove the
file itself under its own name), then remove the folders they created. What they refuse is
an :class:`OutputPathError` naming the option and the reason; nothing is left behind.

If a write still fails after the work (a disk that filled, a folder removed meanwhile),
:func:`save_unsaved` keeps the result in a named fallback file (:func:`unsaved_folders`:
``$XDG_CACHE_HOME/kgrader/unsaved`` or ``~/.cache/kgrader/unsaved``, else the current
folder) and the command says both paths.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from pathlib import Path

from grader.errors import UsageError

PROBE_PREFIX = ".kgrader-probe-"
UNSAVED_ENV = "KGRADER_UNSAVED_DIR"


class OutputPathError(UsageError):
    """An output path that cannot be written."""

    code = "bad_output_path"


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and not p.is_symlink() and p != p.parent:
        p = p.parent
    return p


def _why(e: OSError) -> str:
    return e.strerror or type(e).__name__


def _make_dirs(path: Path, what: str, shown: Path) -> list[Path]:
    """Create the missing folders down to ``path``; return those created, outermost first."""
    missing: list[Path] = []
    p = path.absolute()
    while not p.exists() and not p.is_symlink() and p != p.parent:
        missing.append(p)
        p = p.parent
    created: list[Path] = []
    try:
        for d in reversed(missing):
            d.mkdir()
            created.append(d)
    except OSError as e:
        _remove_dirs(created)
        raise OutputPathError(f"{what} {shown}: cannot create the folder {e.filename or d}: "
                              f"{_why(e)}") from None
    return created


def _remove_dirs(created: list[Path]) -> None:
    for d in reversed(created):
        with contextlib.suppress(OSError):  # someone else's file appeared in it: leave it
            d.rmdir()


def _probe(folder: Path, what: str, shown: Path, name: str | None = None) -> None:
    """Create, write and remove a file in ``folder`` (``name``: that very name, else a
    unique probe name), as the real write will."""
    target = folder / (name or f"{PROBE_PREFIX}{secrets.token_hex(6)}")
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        raise OutputPathError(f"{what} {shown}: cannot write in the folder {folder}: "
                              f"{_why(e)}") from None
    try:
        os.write(fd, b"k")
    except OSError as e:
        raise OutputPathError(f"{what} {shown}: cannot write in the folder {folder}: "
                              f"{_why(e)}") from None
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(target)


def check_output_dir(path: str | Path, what: str) -> None:
    """``path`` is, or can be created as, a folder this process can write into (proven by
    a probe file created and removed there; folders created for it are removed)."""
    p = Path(path)
    if p.exists() or p.is_symlink():
        if not p.is_dir():
            raise OutputPathError(f"{what} {p} is a file, not a folder")
        _probe(p, what, p)
        return
    anc = _nearest_existing(p)
    if not anc.is_dir():
        raise OutputPathError(f"{what} {p}: {anc} is a file, not a folder, so {p} "
                              "cannot be created")
    created = _make_dirs(p, what, p)
    try:
        _probe(p, what, p)
    finally:
        _remove_dirs(created)


def check_output_file(path: str | Path, what: str) -> None:
    """``path`` is, or can be created as, a regular file this process can write, in a
    folder where it can create files (a temp file renamed over it, a database journal)."""
    p = Path(path)
    if p.is_dir():
        raise OutputPathError(f"{what} {p} is a folder, not a file")
    folder = p.absolute().parent
    if p.exists():
        if not p.is_file():
            raise OutputPathError(f"{what} {p} is not a regular file")
        try:  # opened for writing, nothing written: its content and times stay
            os.close(os.open(p, os.O_WRONLY | os.O_APPEND))
        except OSError as e:
            raise OutputPathError(f"{what} {p}: the file is not writable: {_why(e)}") from None
        _probe(folder, what, p)
        return
    anc = _nearest_existing(folder)
    if not anc.is_dir():
        raise OutputPathError(f"{what} {p}: {anc} is a file, not a folder, so {p} "
                              "cannot be created")
    created = _make_dirs(folder, what, p)
    try:
        _probe(folder, what, p)
        _probe(folder, what, p, name=p.name)
    finally:
        _remove_dirs(created)


def unsaved_folders() -> list[Path]:
    """Where :func:`save_unsaved` tries, in order: ``$KGRADER_UNSAVED_DIR``, the user's
    cache (``$XDG_CACHE_HOME`` or ``~/.cache``) ``/kgrader/unsaved``, the current folder."""
    out = []
    if os.environ.get(UNSAVED_ENV):
        out.append(Path(os.environ[UNSAVED_ENV]))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    out += [Path(cache) / "kgrader" / "unsaved", Path.cwd()]
    return out


def save_unsaved(data: bytes, stem: str) -> Path | None:
    """Keep ``data`` (a result whose real destination failed) in a new file named
    ``kgrader-<stem>-<UTC time>-<pid>.json`` in the first of :func:`unsaved_folders` that
    takes it; its path, or None when none did."""
    name = f"kgrader-{stem}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}.json"
    for folder in unsaved_folders():
        target = folder / name
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError:
            continue
        try:
            with open(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            return target
        except OSError:
            target.unlink(missing_ok=True)
    return None
