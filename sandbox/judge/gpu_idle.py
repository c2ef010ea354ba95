"""Is the device idle between two timed calls? The judge's own probe (judge side, CUDA).

A runner synchronizes its device before and after every timed call, so nothing launched
through torch or Triton in its primary context outlives a call, and extra threads are
counted (``sandbox.judge.isolation``). A candidate can still create a second CUDA context of its
own through the driver API (``ctypes``; the scan denies it, but with the scan off it is
there) and leave a kernel running in it: the GPU then time-slices between contexts, and
in paired timing the current best's calls run slowed while the candidate's do not.

Between the two sides' calls the judge therefore times a tiny kernel of its own (an add
on one element, then a device synchronize, from the host's clock). On an idle device that
takes tens of microseconds; while another context holds the GPU the kernel waits for a
time slice (a millisecond or more). A probe over the limit is repeated; only a device
that stays busy counts, and the side that ran last is the one whose work outlived its
call.

A probe is timed on the host's clock, so a host whose CPUs are all busy lengthens it too:
the judge's thread, runnable, waits for a CPU. The kernel counts that wait for each thread
(``/proc/thread-self/schedstat``, its second field); each probe records it
(``cpu_wait_ms`` of the probe :meth:`IdleProbe.busy` returns), so that a verdict against a
side rests on the time the device kept the judge waiting, not on the host's load.
"""

from __future__ import annotations

import contextlib
import time

import torch

from sandbox.contract import stats

CALIBRATION_PROBES = 15
# Busy when every one of REPEATS probes takes more than max(FLOOR_MS, FACTOR x the median
# probe of an idle device, measured first).
FLOOR_MS = 0.25
FACTOR = 5.0
REPEATS = 3


class IdleProbe:
    """The judge's probe of its own device (``limit_ms`` from an idle calibration)."""

    def __init__(self) -> None:
        self._x = torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        idle = [self._once()[0] for _ in range(CALIBRATION_PROBES)]
        self.idle_ms = stats.median(idle)
        self.limit_ms = max(FLOOR_MS, FACTOR * self.idle_ms)
        self.worst_ms = 0.0
        self.cpu_wait_ms = 0.0  # the judge's wait for a CPU during the probe busy() returned

    def _once(self) -> tuple[float, float]:
        """One probe: (ms on the host's clock, ms of it the judge's thread waited for a CPU)."""
        w0 = run_queue_wait_ms()
        t0 = time.perf_counter()
        self._x.add_(1.0)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        w1 = run_queue_wait_ms()
        return ms, (w1 - w0 if w0 is not None and w1 is not None else 0.0)

    def samples(self, n: int) -> list[tuple[float, float]]:
        """``n`` probes now: (ms on the host's clock, ms of it spent waiting for a CPU)."""
        return [self._once() for _ in range(n)]

    def busy(self) -> float | None:
        """The fastest of REPEATS probes when all exceed the limit (the device stayed busy),
        else None; ``cpu_wait_ms`` is that probe's wait for a CPU."""
        best, wait = self._once()
        for _ in range(REPEATS - 1):
            if best <= self.limit_ms:
                break
            ms, w = self._once()
            if ms < best:
                best, wait = ms, w
        self.worst_ms = max(self.worst_ms, best if best <= self.limit_ms else 0.0)
        self.cpu_wait_ms = wait
        return best if best > self.limit_ms else None


def run_queue_wait_ms() -> float | None:
    """How long the calling thread has waited, runnable, for a CPU since it started (ms; the
    kernel's schedstat ``run_delay``); None where the kernel does not say."""
    with contextlib.suppress(OSError, ValueError, IndexError), \
            open("/proc/thread-self/schedstat", encoding="ascii") as f:
        return int(f.read().split()[1]) / 1e6
    return None


_PROBE: list[IdleProbe] = []


def calibrate() -> None:
    """Measure the idle device once, before any candidate is imported (the compile stage):
    a candidate that kept the GPU busy from its import on cannot inflate the limit."""
    if not _PROBE and torch.cuda.is_available():
        _PROBE.append(IdleProbe())


def probe() -> IdleProbe:
    """The judge's probe, calibrated on first use if :func:`calibrate` was not called."""
    calibrate()
    return _PROBE[0]
