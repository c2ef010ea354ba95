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
"""

from __future__ import annotations

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
        idle = [self._once() for _ in range(CALIBRATION_PROBES)]
        self.idle_ms = stats.median(idle)
        self.limit_ms = max(FLOOR_MS, FACTOR * self.idle_ms)
        self.worst_ms = 0.0

    def _once(self) -> float:
        t0 = time.perf_counter()
        self._x.add_(1.0)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    def busy(self) -> float | None:
        """The fastest of REPEATS probes when all exceed the limit (the device stayed busy),
        else None."""
        best = self._once()
        for _ in range(REPEATS - 1):
            if best <= self.limit_ms:
                break
            best = min(best, self._once())
        self.worst_ms = max(self.worst_ms, best if best <= self.limit_ms else 0.0)
        return best if best > self.limit_ms else None


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
