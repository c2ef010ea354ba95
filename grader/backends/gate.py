"""The measurement gate: the next evaluation prepares while the current one measures.

A leaderboard worker can start evaluation B's sandbox while evaluation A still holds the
GPU. B's judge reads its request, starts its runners and imports torch (CPU work only,
no candidate code: runners import their module only when the judge asks), then blocks
on a FIFO in its own output folder, :data:`sandbox.contract.wire.GATE_NAME`, before it touches the
device. The host writes to that FIFO only while it holds the device's
:class:`MeasureGate`, and gives the gate back only after A's whole sandbox is dead (the
supervisor killed the tree), so no GPU work of A's candidate overlaps B's.

* The FIFO is created by the host, mode 0600, owned by the judge's uid, in the ``out/``
  folder only the judge's uid can enter. The judge unlinks it after the grant, before any
  candidate code runs.
* The sandbox's wall limit counts from the grant: waiting for the device is not the
  candidate's time. The wait itself is bounded by :data:`MAX_WAIT_FACTOR` times the wall
  limit (the holder is bounded by its own limit; this only catches a host fault), after
  which the sandbox is killed as an infrastructure fault.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from sandbox.contract import wire

MAX_WAIT_FACTOR = 20.0
POLL_S = 0.02


class MeasureGate:
    """One per device: whoever holds it may use the device (``name`` is for logs)."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._lock = threading.Lock()
        self.grants = 0

    def __repr__(self) -> str:
        return f"MeasureGate({self.name!r})"

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the device for work of the host's own (a calibration run, a test)."""
        with self._lock:
            yield


def make_fifo(out_dir: Path) -> Path:
    """The gate's FIFO in an evaluation's ``out/`` folder, for the judge's uid only."""
    path = out_dir / wire.GATE_NAME
    os.mkfifo(path, 0o600)
    if os.geteuid() == 0:
        os.chown(path, wire.JUDGE_UID, wire.JUDGE_GID)
    return path


def open_if_read(fifo: Path) -> int | None:
    """A write descriptor on the gate's FIFO once its judge holds it open for reading (a
    non-blocking open for writing succeeds only then), else None. Keep it open until the
    grant is written or the turn given up: closing it would end the judge's read with
    nothing (:mod:`grader.pool.turn`). Raises OSError when the path is not a FIFO."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno == errno.ENXIO:  # no reader yet: the judge is still preparing
            return None
        raise
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{fifo} is not the gate's FIFO")
    return fd


class Turn:
    """One sandbox's turn at a gate: :meth:`wait` for it, then :meth:`release` it once the
    sandbox is dead. Safe to release more than once, or without ever having waited."""

    def __init__(self, gate: MeasureGate, fifo: Path) -> None:
        self.gate, self.fifo = gate, fifo
        self.granted_at: float | None = None
        self._fd: int | None = None
        self._held = False

    def wait(self, alive: Callable[[], bool], limit_s: float) -> float | None:
        """Block until the gate is ours and the judge told, or ``alive()`` turns false, or
        ``limit_s`` passes. Returns the monotonic time of the grant, or None."""
        deadline = time.monotonic() + limit_s
        while not self.gate._lock.acquire(timeout=POLL_S):
            if not alive() or time.monotonic() > deadline:
                return None
        self._held = True
        self.gate.grants += 1
        # O_RDWR: the open never blocks and the byte stays in the pipe until the judge reads
        # it (a FIFO drops its data only when the last descriptor closes: ours is kept open
        # until release).
        fd = os.open(self.fifo, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW)
        self._fd = fd
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            raise OSError(f"{self.fifo} is not the gate's FIFO")
        os.write(fd, b"g")
        self.granted_at = time.monotonic()
        return self.granted_at

    def refused(self) -> str:
        """Why :meth:`wait` gave no grant on purpose (a warm sandbox discarded by its pool,
        :mod:`grader.pool.turn`); empty when it did not."""
        return ""

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self._held:
            self._held = False
            self.gate._lock.release()
