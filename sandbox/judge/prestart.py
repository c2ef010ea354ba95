"""Runners started ahead: while the judge imports torch, so do they.

The judge starts the runners a plain evaluation will need (the candidate; the current best
when there is one) right after reading its request and before importing torch; each
imports torch in parallel with the judge and then waits for its buffers over its unix
socket (no CUDA context before that: a runner prepared ahead of its measurement gate
touches no device). Each is still used once, for one module,
under its own uid: nothing is shared between candidates.

On CUDA, paired timing opens fresh runners for both sides (and again for the replicate),
each a torch import of 3-4 s on the evaluation's critical path. Where the sandbox has the
CPUs and the memory for it (:data:`MIN_CPUS_AHEAD`, :data:`MIN_MEMORY_MIB_AHEAD`), those
are started with the others, at the judge's start: three for the candidate, two for the
current best. None starts later, so no
import runs beside a measurement; a replicate's pair that is not needed is closed unused.
Standard library only (it runs before torch is imported).
"""

from __future__ import annotations

import contextlib
import os

from sandbox.contract.wire import JudgeRequest
from sandbox.launcher.proc import RunnerFailure, RunnerHandle
from sandbox.problem import handle as problem_handle

MIN_CPUS_AHEAD = 4
# Five runners and the judge, each with torch imported (~0.4-0.6 GB), must fit in the
# sandbox's memory limit with room for the evaluation itself.
MIN_MEMORY_MIB_AHEAD = 4096

_ready: dict[str, list[RunnerHandle]] = {}
_device = "cpu"
_entry = "launch"


def usable_cpus() -> float:
    """CPUs this sandbox may use: the cgroup's quota where one is set, else the affinity."""
    n: float = float(len(os.sched_getaffinity(0)))
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            n = min(n, int(quota) / int(period))
    return n


def _spawn(path: str) -> None:
    with contextlib.suppress(RunnerFailure, OSError):
        _ready.setdefault(path, []).append(RunnerHandle(path, _entry, _device))


def start(req: JudgeRequest) -> None:
    """Start the runners of a plain evaluation; a failure here only means no head start."""
    global _device, _entry
    if req.task is not None and req.mode != "measure_peak":  # the task's problem process
        problem_handle.start_ahead("cuda" if req.device == "cuda" else "cpu",
                                   req.limits.compile_s, req.limits.run_s)
    if req.mode != "evaluate" or req.task is None or req.sanitize is not None:
        return
    _device, _entry = ("cuda" if req.device == "cuda" else "cpu"), req.task.entrypoint
    memory = req.limits.memory_mib
    ahead = (_device == "cuda" and bool(req.current) and usable_cpus() >= MIN_CPUS_AHEAD
             and (memory is None or memory >= MIN_MEMORY_MIB_AHEAD))
    for path in (req.candidate, req.current):
        if path and path not in _ready:
            # candidate: compile..benchmark, paired timing, replicate; current: the last two
            for _ in range((3 if path == req.candidate else 2) if ahead else 1):
                _spawn(path)


def take(path: str) -> RunnerHandle | None:
    """A runner started ahead for ``path``, once; None when there is none."""
    ready = _ready.get(path) or []
    return ready.pop(0) if ready else None


def pending() -> dict[int, int]:
    """pid -> uid of runners (and a problem process) started but not yet taken (expected
    processes, not extra)."""
    return {**problem_handle.pending(), **{h.proc.pid: h.uid for hs in _ready.values() for h in hs}}


def close_all() -> None:
    problem_handle.close_ahead()
    for path in list(_ready):
        for h in _ready.pop(path):
            h.close()
