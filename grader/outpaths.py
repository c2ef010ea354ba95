"""Output paths, checked before any work: a report that cannot be written must not cost
a grading first.

A command that writes a folder (``--out``, ``--records``, a site) or a file (``--state``,
a cache) calls these before it grades; what they refuse is a :class:`UsageError` naming
the option and the reason. Nothing is created: a command interrupted before its first
write leaves no empty folder behind.
"""

from __future__ import annotations

import os
from pathlib import Path

from grader.errors import UsageError


class OutputPathError(UsageError):
    """An output path that cannot be written."""

    code = "bad_output_path"


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and not p.is_symlink() and p != p.parent:
        p = p.parent
    return p


def _check_creatable(path: Path, what: str) -> None:
    """``path`` does not exist: its nearest existing ancestor must be a writable folder."""
    anc = _nearest_existing(path)
    if not anc.is_dir():
        raise OutputPathError(f"{what} {path}: {anc} is a file, not a folder, so {path} "
                              "cannot be created")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise OutputPathError(f"{what} {path}: the folder {anc} is not writable")


def check_output_dir(path: str | Path, what: str) -> None:
    """``path`` is, or can be created as, a folder this process can write into."""
    p = Path(path)
    if p.exists() or p.is_symlink():
        if not p.is_dir():
            raise OutputPathError(f"{what} {p} is a file, not a folder")
        if not os.access(p, os.W_OK | os.X_OK):
            raise OutputPathError(f"{what} {p}: the folder is not writable")
        return
    _check_creatable(p, what)


def check_output_file(path: str | Path, what: str) -> None:
    """``path`` is, or can be created as, a regular file this process can write."""
    p = Path(path)
    if p.is_dir():
        raise OutputPathError(f"{what} {p} is a folder, not a file")
    if p.exists():
        if not p.is_file():
            raise OutputPathError(f"{what} {p} is not a regular file")
        if not os.access(p, os.R_OK | os.W_OK):
            raise OutputPathError(f"{what} {p}: the file is not writable")
        if not os.access(p.absolute().parent, os.W_OK | os.X_OK):
            raise OutputPathError(f"{what} {p}: its folder is not writable")
        return
    _check_creatable(p, what)
