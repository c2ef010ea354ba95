"""A warm sandbox's turn at its gate: ready, then taken once, then granted (or discarded).

A warm sandbox is a gated judge run (:mod:`grader.backends.gate`) whose sources are not
staged yet: its judge reads its request, starts its runners and its problem process,
imports torch and the stage modules, waits until all of them are quiet, and then blocks on
the gate's FIFO. This turn is what the backend's supervisor waits on:

1. **starting -> ready**: the judge has opened the FIFO's read end. The host sees that
   without writing anything: a non-blocking ``open(O_WRONLY)`` of a FIFO succeeds only when
   a reader has it open. That descriptor stays open (closing it would end the judge's read
   with nothing: "the host closed the gate without a grant").
2. **ready -> taken**: :meth:`claim`, once; a second claim is refused.
3. **taken -> granted**: once the candidate is staged (:meth:`staged`), the device's
   :class:`MeasureGate` (when the pool has one) is acquired and the grant byte written,
   exactly as for any gated run; the sandbox's wall limit counts from here.

A sandbox that is not taken within ``idle_s`` of becoming ready, that does not become
ready within ``start_s``, or that is :meth:`discard`-ed, gets no grant: :meth:`wait`
returns None and the supervisor kills its whole tree.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from grader.backends.gate import POLL_S, MeasureGate, Turn, open_if_read

State = Literal["starting", "ready", "taken", "discarded"]


class WarmTurn(Turn):
    """See the module docstring. Thread-safe: the supervisor's thread waits, the pool's
    threads claim, stage and discard."""

    def __init__(self, fifo: Path, gate: MeasureGate | None, *, start_s: float, idle_s: float):
        super().__init__(gate if gate is not None else MeasureGate("warm"), fifo)
        self.start_s, self.idle_s = start_s, idle_s
        self.state: State = "starting"
        self.ready_at: float | None = None
        self.why = ""  # why it was discarded, for logs
        self._lock = threading.Lock()
        self._staged = threading.Event()
        self._probe: int | None = None

    def claim(self) -> bool:
        """Take a ready sandbox for one evaluation; False when it is not ready, or taken."""
        with self._lock:
            if self.state != "ready":
                return False
            self.state = "taken"
            return True

    def staged(self) -> None:
        """The taken sandbox's sources are in place: let the grant go ahead."""
        self._staged.set()

    def discard(self, why: str) -> None:
        """No grant, ever: the supervisor kills the sandbox (a no-op once granted)."""
        with self._lock:
            if self.state != "discarded":
                self.state, self.why = "discarded", why
        self._staged.set()

    def refused(self) -> str:
        return self.why if self.state == "discarded" else ""

    def _open_probe(self) -> bool:
        self._probe = open_if_read(self.fifo)
        return self._probe is not None

    def wait(self, alive: Callable[[], bool], limit_s: float) -> float | None:
        t0 = time.monotonic()
        try:
            while not self._open_probe():
                if not alive() or self.state == "discarded":
                    return None
                if time.monotonic() - t0 > self.start_s:
                    self.discard(f"not ready within {self.start_s:.0f} s")
                    return None
                time.sleep(POLL_S)
        except OSError as e:
            self.discard(f"gate: {e}")
            return None
        with self._lock:
            if self.state == "starting":
                self.state, self.ready_at = "ready", time.monotonic()
        deadline, extended = time.monotonic() + self.idle_s, False
        while not self._staged.wait(POLL_S):
            if not alive():
                self.discard("the judge ended while warm")
                return None
            now = time.monotonic()
            if now > deadline:
                if self.state == "taken" and not extended:  # its sources are on the way
                    deadline, extended = now + self.start_s, True
                    continue
                self.discard(f"not used within {self.idle_s:.0f} s of being ready")
                return None
        if self.state != "taken":
            return None
        return super().wait(alive, limit_s)

    def release(self) -> None:
        if self._probe is not None:
            with contextlib.suppress(OSError):
                os.close(self._probe)
            self._probe = None
        super().release()
