"""Durable file primitives for the records folder: nothing half-written survives a crash.

Whole-file writes go through a temp file in the same folder, fsync, rename and a folder
fsync; appends are one ``write`` of one JSON line plus fsync; a torn final line (a crash
mid-append) is cut before the next append. Callers hold the records lock.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from pydantic import BaseModel


def fsync_dir(path: Path) -> None:
    # A rename or a new file is durable only once its directory entry is.
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_fsynced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write(path: Path, data: bytes) -> None:
    """Write via a temp file in the same folder, fsync it, rename, fsync the folder."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    write_fsynced(tmp, data)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def cut_torn_tail(path: Path) -> None:
    """Drop a final line that lacks its newline (a crash mid-append), so appends stay whole."""
    if not path.exists():
        return
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        # Scan back for the last newline; files stay small enough to read whole.
        f.seek(0)
        data = f.read()
        f.truncate(data.rfind(b"\n") + 1)
        f.flush()
        os.fsync(f.fileno())


def append_line(path: Path, obj: dict[str, Any]) -> None:
    """Append one JSON line with a single write and fsync it (caller holds the lock)."""
    created = not path.exists()
    line = json.dumps(obj, ensure_ascii=False, default=jsonable) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        data = line.encode("utf-8")
        while data:  # os.write may write less than asked; keep going until all is out
            data = data[os.write(fd, data):]
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


def jsonable(obj: object) -> object:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", errors="replace")
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    return repr(obj)


# --- reading --------------------------------------------------------------------------
