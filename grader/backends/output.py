"""The one stdout/stderr policy of every backend: drain to the end, keep at most a cap.

A reader never stops reading early. Closing a pipe (or disconnecting an attach stream)
once the cap is reached would change what the sandbox sees -- ``SIGPIPE``/``EPIPE`` on one
backend, silent discard on another -- and a sandbox that stops being read blocks on a full
pipe until its wall limit. So each stream is read to its end, the first ``cap`` bytes are
kept, the rest is counted and discarded (host memory stays flat), and
:func:`split_budget` then trims both streams to one shared budget
(``Limits.output_bytes`` is a cap on stdout and stderr together).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator

READ_CHUNK = 1 << 16


def fd_chunks(fd: int) -> Iterator[bytes]:
    """Chunks read from a pipe until EOF (or until the pipe errors)."""
    while True:
        try:
            chunk = os.read(fd, READ_CHUNK)
        except OSError:
            return
        if not chunk:
            return
        yield chunk


class OutputDrain(threading.Thread):
    """Reads ``chunks`` to the end in a thread, keeping the first ``cap`` bytes.

    ``errors`` are the exception types that mean "the stream ended" (a dropped
    connection); ``close`` runs once at the end, whatever happened.
    """

    def __init__(
        self,
        chunks: Iterable[bytes],
        cap: int,
        *,
        name: str = "kgrader-output",
        errors: tuple[type[BaseException], ...] = (OSError, ValueError),
        close: Callable[[], object] | None = None,
    ) -> None:
        super().__init__(daemon=True, name=name)
        self.chunks = chunks
        self.cap = cap
        self.errors = errors
        self.close = close
        self.buf = bytearray()
        self.total = 0

    def run(self) -> None:
        try:
            for chunk in self.chunks:
                self.total += len(chunk)
                room = self.cap - len(self.buf)
                if room > 0:
                    self.buf += chunk[:room]
        except self.errors:
            pass
        finally:
            if self.close is not None:
                with contextlib.suppress(Exception):
                    self.close()

    @property
    def truncated(self) -> bool:
        """Whether any byte was discarded."""
        return self.total > len(self.buf)


def split_budget(out: bytes, err: bytes, cap: int) -> tuple[bytes, bytes]:
    """Trim stdout+stderr to ``cap`` bytes in total; a stream under half keeps all of it."""
    if len(out) + len(err) <= cap:
        return out, err
    half = cap // 2
    if len(err) <= half:
        return out[: cap - len(err)], err
    if len(out) <= half:
        return out, err[: cap - len(out)]
    return out[:half], err[: cap - half]


def collect(out: OutputDrain, err: OutputDrain, cap: int) -> tuple[bytes, bytes, bool]:
    """``(stdout, stderr, truncated)`` of two finished drains under one shared ``cap``."""
    o, e = split_budget(bytes(out.buf), bytes(err.buf), cap)
    truncated = out.truncated or err.truncated or len(o) + len(e) < len(out.buf) + len(err.buf)
    return o, e, truncated
