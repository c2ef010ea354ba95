"""Is the GPU the sandbox's alone right now? Asked before a timing verdict blames a side (CUDA).

Operators share GPUs with other jobs. Another job's kernels time-slice with the sandbox's:
a copy, a round trip or the judge's probe waits a time slice (a millisecond or more), and
a bound that would otherwise be the candidate's fault (work deferred into the returned
outputs' copy, work that escaped the timed region, the device busy between paired calls)
is exceeded by an honest kernel (an H200 beside other jobs: an honest GPU MODE vectoradd's
copy took 15.3 ms against a 6.8 ms bound, ``work_deferred_to_copy``). So before such a
verdict the judge measures the device again, here, and lets the verdict stand only when
nothing else is on it; otherwise the verdict is ``timing_unreliable`` (infrastructure,
retried) with these figures -- never a pass either.

Three kinds of evidence, any one enough:

* **processes**: NVML counts more compute processes than the judge started (inside a pid
  namespace it sees only the sandbox's own, so another job is seldom seen this way);
* **memory**: the device's used memory (``mem_get_info``, the whole device) exceeds what
  the processes NVML shows hold by more than OUTSIDE_BYTES: memory held by processes the
  sandbox cannot see, another job's (a CUDA context alone takes ~0.5 GiB). Only where NVML
  gives every visible process's usage; where it does not, this evidence is not used;
* **time**: the judge's own probe (an add on one element and a synchronize,
  :mod:`sandbox.judge.gpu_idle`), PROBES times, less each probe's wait for a CPU: one over
  ``gpu_idle.FLOOR_MS`` waited for the device (on an idle H200 a probe takes tens of
  microseconds).

The host's NVML watch, outside the pid namespace, sees another job's processes directly and
turns any timing verdict on such a run into ``foreign_gpu_process``
(``grader.grading.shared_device``); this is the judge's own look, which needs no host.
"""

from __future__ import annotations

from typing import Any

import torch

from sandbox.judge import gpu_idle
from sandbox.judge.device import memory_figures, open_nvml
from sandbox.judge.hub import Hub
from sandbox.tools import nvml

PROBES = 5
OUTSIDE_BYTES = 2 << 30  # used memory no visible process holds, beyond the driver's own


def contention(ev: Hub) -> dict[str, Any] | None:
    """The figures that show the device is not the sandbox's alone now, or None (CUDA only;
    None on the CPU, whose timing has its own load accounting)."""
    if ev.dev != "cuda" or not torch.cuda.is_available():
        return None
    out: dict[str, Any] = {}
    why: list[str] = []
    if ev.nvml_handle is None:
        ev.nvml_handle = open_nvml(ev.dev)[0]
    if ev.nvml_handle is not None:
        extra = nvml.foreign_compute_processes(ev.nvml_handle, 1 + len(ev.sides)
                                               + len(ev.problem.harness_processes()))
        if extra is not None:
            why.append(extra)
    held = _held(ev)
    if held is not None:
        out["outside_bytes"] = held[0]
        if held[1] is not None:
            why.append(held[1])
    probe = gpu_idle.probe()
    samples = probe.samples(PROBES)
    worst = max(ms - wait for ms, wait in samples)
    out.update(probe_ms=[round(ms, 4) for ms, _ in samples],
               probe_cpu_wait_ms=[round(w, 4) for _, w in samples], probe_idle_ms=probe.idle_ms)
    if worst > gpu_idle.FLOOR_MS:
        why.append(f"the judge's probe of the device took {worst:.3f} ms beyond its wait for a "
                   f"CPU against {gpu_idle.FLOOR_MS} ms on an idle device (another context's "
                   "time slice)")
    return {**out, "contention": "; ".join(why)} if why else None


def held_outside(ev: Hub) -> str | None:
    """Why the device holds another job's memory (the memory evidence alone), or None.
    For the busy-device check between paired calls, which measures the time itself."""
    if ev.dev != "cuda":
        return None
    if ev.nvml_handle is None:
        ev.nvml_handle = open_nvml(ev.dev)[0]
    held = _held(ev)
    return None if held is None else held[1]


def _held(ev: Hub) -> tuple[int, str | None] | None:
    """(used bytes no visible process holds, why that is another job's or None), or None
    where it cannot be told."""
    fig = memory_figures(ev.dev, ev.nvml_handle)
    outside = outside_bytes(fig.free, fig.total, fig.holders)
    if outside is None:
        return None
    if outside <= OUTSIDE_BYTES:
        return outside, None
    return outside, (f"{outside / 2**30:.2f} GiB of device memory held by processes this "
                     f"sandbox cannot see ({fig.free / 2**30 if fig.free else 0:.2f} GiB free): "
                     "another job")


def outside_bytes(free: int | None, total: int | None, holders: dict[str, int]) -> int | None:
    """Used device memory that no process NVML shows holds, bytes; None where NVML did not
    give every visible process's usage (then nothing can be told)."""
    if free is None or total is None or not holders or any(n <= 0 for n in holders.values()):
        return None
    return max(0, total - free - sum(holders.values()))
