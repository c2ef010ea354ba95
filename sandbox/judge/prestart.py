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
A warm sandbox (``req.warm``, :mod:`grader.pool`) starts the same processes before any
source is staged: its runners start without a module (``RunnerHandle(deferred=True)``),
and :func:`take` copies each one's module in, at the grant, before its ``load``.
:func:`warm_up` then imports the judge's stage modules and waits until every process
started ahead has gone quiet, so that a sandbox that reaches its gate is warm.
Standard library only at import (it runs before torch is imported).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import time

from sandbox.contract.wire import JudgeRequest
from sandbox.launcher.identity import RUNNER_IDS
from sandbox.launcher.proc import RunnerFailure, RunnerHandle
from sandbox.problem import handle as problem_handle

MIN_CPUS_AHEAD = 4
# Five runners and the judge, each with torch imported (~0.4-0.6 GB), must fit in the
# sandbox's memory limit with room for the evaluation itself.
MIN_MEMORY_MIB_AHEAD = 4096
# A calibrate sandbox's pairs started ahead: each runner with torch imported and no CUDA
# context yet, and the judge with the problem process beside them.
RUNNER_MIB_AHEAD = 768
JUDGE_MIB_AHEAD = 4096

# The judge's modules a warm sandbox imports before its gate (sandbox.judge.run imports
# them when an evaluation starts).
STAGE_MODULES = ("sandbox.judge.evaluation", "sandbox.judge.correctness",
                 "sandbox.judge.benchmark", "sandbox.judge.acceptance")
QUIET_S = 0.2  # how long every other process must sleep, burning no CPU, to count as settled
POLL_S = 0.05

_ready: dict[str, list[RunnerHandle]] = {}
_device = "cpu"
_entry = "launch"
_deferred = False
_device_sent: set[int] = set()  # id() of runners asked for their CUDA context, not answered


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
        _ready.setdefault(path, []).append(RunnerHandle(path, _entry, _device,
                                                        deferred=_deferred))


def start(req: JudgeRequest) -> None:
    """Start the runners of a plain evaluation; a failure here only means no head start."""
    global _device, _entry, _deferred
    if req.task is not None and req.mode != "measure_peak":  # the task's problem process
        problem_handle.start_ahead("cuda" if req.device == "cuda" else "cpu",
                                   req.limits.compile_s, req.limits.run_s)
    if req.mode == "calibrate" and req.task is not None and req.calibrate is not None:
        # A calibrate sandbox prepared ahead of its gate (bench/calibration.py
        # --prepare-ahead) has its runners' imports done before it touches the device. Same
        # rule as an evaluation: no CUDA context yet.
        _device, _entry = ("cuda" if req.device == "cuda" else "cpu"), req.task.entrypoint
        for sc, pairs in zip(req.calibrate.scenarios, calibrate_pairs(req), strict=True):
            for _ in range(pairs):
                for path in (sc["candidate"], sc["current"]):
                    _spawn(path)
        return
    if req.mode != "evaluate" or req.task is None or req.sanitize is not None:
        return
    _device, _entry = ("cuda" if req.device == "cuda" else "cpu"), req.task.entrypoint
    _deferred = req.warm  # nothing is staged yet: each module is copied in by take()
    memory = req.limits.memory_mib
    ahead = (_device == "cuda" and bool(req.current) and usable_cpus() >= MIN_CPUS_AHEAD
             and (memory is None or memory >= MIN_MEMORY_MIB_AHEAD))
    for path in (req.candidate, req.current):
        if path and path not in _ready:
            # candidate: compile..benchmark, paired timing, replicate; current: the last two
            for _ in range((3 if path == req.candidate else 2) if ahead else 1):
                _spawn(path)


def calibrate_pairs(req: JudgeRequest) -> list[int]:
    """Runner pairs to start ahead for each scenario of a calibrate request: one for its
    first decision; with ``fresh_runners`` one for every decision it asks for, where the
    sandbox has the CPUs, the memory (:data:`RUNNER_MIB_AHEAD` a runner) and the runner uids
    for them, so that no decision after the first waits for a torch import either, and none
    runs beside a measurement."""
    assert req.calibrate is not None
    memory = req.limits.memory_mib
    room = (len(RUNNER_IDS) - 1) // 2  # pairs: a uid per runner, one for the problem process
    if memory is not None:
        room = min(room, max(memory - JUDGE_MIB_AHEAD, 0) // (2 * RUNNER_MIB_AHEAD))
    many = req.device == "cuda" and usable_cpus() >= MIN_CPUS_AHEAD
    out: list[int] = []
    for sc in req.calibrate.scenarios:
        want = int(sc.get("decisions", req.calibrate.decisions)) if sc.get("fresh_runners") else 1
        n = max(1, min(want, room)) if many else 1
        room = max(room - n, 0)
        out.append(n)
    return out


def ready_count(path: str) -> int:
    """How many runners started ahead for ``path`` are still waiting to be taken."""
    return len(_ready.get(path) or [])


def device_ahead(path: str) -> None:
    """CUDA: the runner :func:`take` will give for ``path`` creates its CUDA context now,
    beside the judge's (``sandbox.judge.correctness``); :func:`take` takes the answer. A
    runner that cannot is left to fail its setup, which needs the context anyway."""
    ready = _ready.get(path) or []
    if _device != "cuda" or not ready or id(ready[0]) in _device_sent:
        return
    with contextlib.suppress(RunnerFailure, OSError):
        ready[0].send({"op": "device"})
        _device_sent.add(id(ready[0]))


def take(path: str, timeout: float = 60.0) -> RunnerHandle | None:
    """A runner started ahead for ``path``, once, with its module installed; None when
    there is none. Raises RunnerFailure when a deferred module cannot be installed.
    ``timeout``: how long the answer to :func:`device_ahead` may still take."""
    ready = _ready.get(path) or []
    if not ready:
        return None
    device_done(path, timeout)
    handle = ready.pop(0)
    handle.install()
    return handle


def device_done(path: str, timeout: float) -> None:
    """Wait up to ``timeout`` for the answer to :func:`device_ahead`, whatever it is."""
    ready = _ready.get(path) or []
    if ready and id(ready[0]) in _device_sent:
        _device_sent.discard(id(ready[0]))
        with contextlib.suppress(RunnerFailure):  # its setup says what is wrong
            ready[0].receive(timeout, "compile_timeout")


def _cpu_states() -> dict[int, tuple[str, int]]:
    """pid -> (state, CPU ticks of all its threads) of every other process in the sandbox."""
    out: dict[int, tuple[str, int]] = {}
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            out[int(entry)] = (fields[0], int(fields[11]) + int(fields[12]))
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
    return out


def settle(limit_s: float) -> float:
    """Wait until every other process of the sandbox (the runners and the problem process
    started ahead, whatever they started) has slept for :data:`QUIET_S` without using CPU:
    their imports are done. Bounded by ``limit_s``; the seconds waited."""
    t0 = quiet = time.monotonic()
    last = _cpu_states()
    while time.monotonic() - t0 < limit_s:
        time.sleep(POLL_S)
        now, states = time.monotonic(), _cpu_states()
        if any(st not in ("S", "I", "Z") or last.get(pid, (st, ticks))[1] != ticks
               for pid, (st, ticks) in states.items()):
            quiet = now
        last = states
        if now - quiet >= QUIET_S:
            break
    return time.monotonic() - t0


def warm_up(req: JudgeRequest) -> float:
    """A warm sandbox's last steps before its gate: the judge's stage modules imported (so
    torch, the problem code's host side and the checks are loaded), then :func:`settle`.
    The seconds it took."""
    t0 = time.monotonic()
    for name in STAGE_MODULES:
        importlib.import_module(name)
    settle(req.limits.compile_s)
    return time.monotonic() - t0


def pending() -> dict[int, int]:
    """pid -> uid of runners (and a problem process) started but not yet taken (expected
    processes, not extra)."""
    return {**problem_handle.pending(), **{h.proc.pid: h.uid for hs in _ready.values() for h in hs}}


def ask_exit_all() -> None:
    """Tell every runner still waiting to be taken to exit, without waiting (close_all
    waits)."""
    for hs in _ready.values():
        for h in hs:
            h.ask_exit()


def close_all() -> None:
    problem_handle.close_ahead()
    for path in list(_ready):
        for h in _ready.pop(path):
            h.close()
