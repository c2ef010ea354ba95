"""The runner's own, early word that the candidate installed no signal handler.

A handler runs candidate code whenever its signal arrives, between calls too, where no
clock sees it (:mod:`sandbox.judge.idle`). The harness's dispositions are taken before the
candidate is imported: Python's (``signal.getsignal``) and the kernel's mask of caught
signals (``SigCgt`` in ``/proc/self/status``, which also sees a handler installed through
ctypes ``sigaction``). After the import and after every call, a signal newly caught, or a
Python handler that is not the harness's, fails with ``signal_handler`` and a clear message.
This check runs in the candidate's process, which can forge it: the judge reads ``SigCgt``
itself and decides; this one names the signal and its handler first.
"""

from __future__ import annotations

import signal

# glibc's own (SIGCANCEL, SIGSETXID), caught once a thread is made: never the candidate's word.
LIBC_SIGNALS = (1 << 31) | (1 << 32)

def caught() -> int:
    """The kernel's mask of the signals this process catches (bit ``n - 1``: signal n)."""
    with open("/proc/self/status", encoding="ascii") as f:
        status = f.read()
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16)
    return 0


def _python() -> dict[int, object]:
    return {int(s): signal.getsignal(s) for s in signal.valid_signals()}


class Dispositions:
    """The harness's signal dispositions, taken before the candidate's import."""

    def __init__(self) -> None:
        self.py = _python()
        self.mask = caught()

    def new_handlers(self) -> str | None:
        """A description of every handler the harness did not have, or None."""
        found = []
        for n, handler in _python().items():
            if handler is not self.py.get(n) and callable(handler):
                found.append(f"{_name(n)} -> {getattr(handler, '__qualname__', type(handler).__name__)}")
        new = caught() & ~self.mask & ~LIBC_SIGNALS
        found += [f"{_name(n)} (caught natively)" for n in range(1, 65)
                  if new >> (n - 1) & 1 and not any(f.startswith(_name(n) + " ") for f in found)]
        return "; ".join(found[:8]) if found else None


def _name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"
