"""The CUDA driver's own start (``cuInit``), begun early in a thread of its own.

``cuInit`` is most of a process's first CUDA context: on an H100 (2026-12-06) it took
0.178 s, after which torch's first tensor (the context itself) took 0.10-0.12 s, against
0.29 s for both in a fresh process. The judge, its runners and the problem process each
begin it at their start, beside their imports (ctypes releases the GIL for the call), so
the compile stage's contexts cost only the context. ``cuInit`` makes no context: no
device memory, no channel, nothing NVML lists as a compute process; a process started
ahead of its measurement gate (a warm pool's) may do it, and the rule that none makes a
CUDA context before its grant holds. Best effort: a failure is left to the first real
CUDA call, which reports it as it always did.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

# How long a process waits for the driver's start before it goes on without it (the
# first CUDA call then waits for the driver's own lock instead).
WAIT_S = 30.0


def start(device: str) -> threading.Thread | None:
    """Begin ``cuInit`` in a thread on ``cuda``; None on any other device."""
    if device != "cuda":
        return None
    t = threading.Thread(target=_init, name="kgrader-cuinit", daemon=True)
    t.start()
    return t


def wait(thread: threading.Thread | None) -> None:
    """Wait for :func:`start`'s thread to end (before a count of the process's threads)."""
    if thread is not None:
        thread.join(WAIT_S)


def _init() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libcuda.so.1").cuInit(0)
