"""The judge's live steps (:mod:`sandbox.contract.wire_progress`): what it tells the host as
it works, through the FIFO the host made in ``out/``.

:func:`open_channel` runs right after the secret is read, before any runner or the problem
process starts: it opens the FIFO for writing, non-blocking and close-on-exec, and unlinks
it, so ``out/`` is empty again (anything found there at the end was planted) and no other
process can ever open it. :func:`tell` never blocks and never fails: a line the pipe has no
room for, or any error, is dropped (progress must not delay or fail a grade).
"""

from __future__ import annotations

import contextlib
import os
import stat

from sandbox.contract.wire_progress import (
    PROGRESS_NAME,
    ProgressEvent,
    ProgressState,
    progress_line,
)

_fd: int | None = None
_key = b""
_n = 0


def open_channel(out: str, key: bytes) -> None:
    """Hold the host's FIFO for writing (when there is one and the host reads it)."""
    global _fd, _key
    path = os.path.join(out, PROGRESS_NAME)
    fd: int | None = None
    try:  # O_NONBLOCK: no reader (a host that stopped reading) is ENXIO, never a wait
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)
            fd = None
    except OSError:
        fd = None
    with contextlib.suppress(OSError):
        os.unlink(path)  # made by the host for this judge alone; gone before any runner starts
    _fd, _key = fd, key


def tell(step: str, state: ProgressState, seconds: float | None = None) -> None:
    """One step line to the host, or nothing."""
    global _n
    if _fd is None:
        return
    _n += 1
    with contextlib.suppress(OSError, ValueError):  # a full pipe (EAGAIN), a host gone: dropped
        os.write(_fd, progress_line(_key, ProgressEvent(_n, step, state, seconds)))
