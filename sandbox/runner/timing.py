"""The one-sample timing recipe, cache flushing, and device facts.

One sample (the measurement protocol): synchronize the device, flush (cold mode),
start event, call, end event, synchronize the device; host wall time recorded too. Each
call is timed on its own: a batch is never divided by its length.

This module runs in the runner process, which also hosts the candidate. The references it
uses (``perf_counter_ns``, ``Event.record``, ``elapsed_time``, ``synchronize``) are bound
when the module is imported, before the candidate is, so patching ``time`` or
``torch.cuda`` does not reach the harness. A candidate that rewrites this module's own
names (the timer-patch attack: ``sandbox.runner.timing._perf_ns``) does reach it: nothing in the
runner's process is out of the candidate's reach. So the judge takes no time on this
module's word: it bounds every claim by its own clock and the device's idle tail
(``sandbox.judge.escape``), and refuses a runner clock that saw less than its own events.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

_perf_ns = time.perf_counter_ns
_cuda_sync = torch.cuda.synchronize
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed = torch.cuda.Event.elapsed_time
_device_sleep = torch.cuda._sleep

# Device time between the host's last pre-call enqueue and the start event: a sleep kernel
# after the flush, so that the candidate's launch (Triton's host path is 20-40 us, more on
# a CPU far from the GPU) is queued before the start event fires. Without it the flush
# alone (~45 us for 128 MiB on an H200) was the lead, and on an H200 one runner of two
# identical kernels measured 1.5% (0.2 us of 13 us) slower than the other in every one of
# 120 A/A decisions: its launches came late, and the gap was timed. In a kernel-only task
# the twin boundary adds its own host time per launch (Twins.lead_us; ~128 us on an H100).
LAUNCH_LEAD_US = 100.0

# Last-level cache sizes for parts whose driver does not report them usefully.
# ROCm MI300X: 256 MB Infinity Cache -> flush >= 1 GiB.
_KNOWN_LLC_MIB = {"MI300": 256, "MI250": 16, "H100": 50, "H200": 60, "A100": 40}


def llc_bytes(device: str) -> int:
    """Best knowledge of the last-level cache size of the device in use."""
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        for key, mib in _KNOWN_LLC_MIB.items():
            if key in props.name:
                l2 = max(l2, mib << 20)
        return l2 or (64 << 20)
    size = 0
    for idx in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (idx / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        digits = text.rstrip("KM")
        if digits.isdigit():
            size = max(size, int(digits) * mult)
    return size or (32 << 20)


# The CPU's flush, at most: a write sweep of 64 MiB takes ~2 ms on a 2-core VM, and each
# timed call and each empty call beside it pays one inside the judge's round trip (256 MiB
# took 8.6 ms a call, a third of a warm evaluation's benchmark stage). A VM reports its
# host's whole L3 (480 MiB here); the interpreted kernels the CPU times are
# microseconds-per-element Python, whose times no cache level moves.
CPU_FLUSH_MAX = 64 << 20


def flush_bytes(device: str, requested_mib: int | None) -> int:
    """Flush buffer: >= 2x the last-level cache, at least 128 MiB on GPUs; 1 GiB on MI300;
    at most :data:`CPU_FLUSH_MAX` on the CPU."""
    if requested_mib:
        return requested_mib << 20
    need = 2 * llc_bytes(device)
    if device == "cuda":
        need = max(need, 128 << 20)
        if "MI300" in torch.cuda.get_device_properties(0).name:
            need = max(need, 1 << 30)
    return min(need, CPU_FLUSH_MAX) if device == "cpu" else need


class Timer:
    """Times one call per sample with the recipe above."""

    def __init__(self, device: str, cache: str, flush_mib: int | None) -> None:
        self.device = device
        self.cache = cache
        self._flush_buf: torch.Tensor | None = None
        if cache == "cold":
            n = flush_bytes(device, flush_mib)
            self._flush_buf = torch.empty(n, dtype=torch.uint8, device=device)
        self.flush_nbytes = 0 if self._flush_buf is None else self._flush_buf.numel()
        self.lead_us = 0.0
        self._lead_cycles = 0
        self._khz = 0
        if device == "cuda":
            # SM cycles of LAUNCH_LEAD_US at the part's top clock: a slower clock only
            # lengthens the lead.
            khz = int(getattr(torch.cuda.get_device_properties(0), "clock_rate", 0) or 2_000_000)
            self._khz = khz
            self._lead_cycles = int(LAUNCH_LEAD_US * khz / 1e3)
            self.lead_us = LAUNCH_LEAD_US
            self._start = _Event(enable_timing=True)  # type: ignore[no-untyped-call]
            self._end = _Event(enable_timing=True)  # type: ignore[no-untyped-call]
            self._idle = _Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def extra_lead(self, us: float) -> None:
        """Queue ``us`` more lead than LAUNCH_LEAD_US from the next call on (the twin
        boundary's own host time before the launch, sandbox.runner.twin.Twins.lead_us)."""
        if self._lead_cycles:  # CUDA, and not turned off for a profiler
            self._lead_cycles = int((LAUNCH_LEAD_US + max(0.0, us)) * self._khz / 1e3)

    def lead_off(self) -> None:
        """No sleep kernel before the start event (a runner under a profiler: the tool would
        profile the sleep kernel as one of the candidate's)."""
        self._lead_cycles = 0
        self.lead_us = 0.0

    def _flush(self) -> None:
        if self._flush_buf is not None:
            # A write sweep: evicts every line the previous call left in the cache.
            self._flush_buf.fill_(0x5A)

    def time_call(self, fn: Callable[[], Any]) -> tuple[float, float, float]:
        """Return (device_ms, wall_ms, tail_ms) of one call of ``fn``.

        ``tail_ms`` (CUDA): device time from the end event to a marker recorded once the
        whole device is idle. It is the same small constant for every honest call, and grows
        by whatever work the call left running past its end event (side streams, threads,
        deferred launches), independently of how long the host took to launch.
        """
        if self.device == "cuda":
            _cuda_sync()
            self._flush()
            if self._lead_cycles:
                _device_sleep(self._lead_cycles)  # type: ignore[no-untyped-call]  # launch queued before start
            w0 = _perf_ns()
            _record(self._start)
            fn()
            _record(self._end)
            _cuda_sync()
            w1 = _perf_ns()
            _record(self._idle)
            _cuda_sync()
            return (float(_elapsed(self._start, self._end)), (w1 - w0) / 1e6,
                    float(_elapsed(self._end, self._idle)))
        self._flush()
        w0 = _perf_ns()
        fn()
        w1 = _perf_ns()
        ms = (w1 - w0) / 1e6
        return ms, ms, 0.0


def thread_count() -> int:
    """Kernel-level threads of this process (native threads included)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1
