"""What may run beside a timed call: only the runners themselves.

Checked after every benchmark and accept call (``Evaluation`` calls :func:`check_beside`):
each runner uid owns exactly its one process (a helper, a grandchild or a zombie under a
runner uid is work the candidate started that could run during timing), and on CUDA no
compute process besides the judge and its runners holds the GPU.
"""

from __future__ import annotations

import time

from sandbox.contract.failure import StageFailure, infrastructure
from sandbox.contract.wire import ErrorStage
from sandbox.judge import prestart
from sandbox.judge.hub import Hub, SideLike
from sandbox.launcher import caps, identity


def threads_of(pid: int) -> int:
    """The kernel's count of ``pid``'s threads (never the runner's word about itself)."""

    try:
        return int(caps.status(f"/proc/{pid}/status")["Threads"])
    except (OSError, KeyError, ValueError) as e:
        raise infrastructure("runner_isolation_unavailable",
                             f"the judge cannot count runner pid {pid}'s threads: {e}") from None


def check_threads(side: SideLike, stage: ErrorStage, when: str) -> None:
    """Fail when the runner has more threads than the harness had before the candidate's
    import (``Side.base_threads``, counted by the judge after the runner's setup, which
    starts torch's own pools). A thread the candidate started, at import or in a call,
    could finish the work after the reply, while the judge checks, or keep the device busy
    while the other side is timed: it is the candidate's, whenever it was made."""
    if side.base_threads < 0 or side.prefix:
        return  # a diagnostics tool's runner (never timed): the tool's threads are its own
    n = threads_of(side.runner.proc.pid)
    for _ in range(4):  # a thread the call joined may take a moment to leave the kernel's count
        if n <= side.base_threads:
            return
        time.sleep(0.005)
        n = threads_of(side.runner.proc.pid)
    if n > side.base_threads:
        raise StageFailure(stage, "background_thread",
                           f"{when} the candidate's runner had {n - side.base_threads} thread(s) "
                           f"more than the harness's own {side.base_threads}: work could run "
                           "outside the timed call or after the reply",
                           detail={"threads": n, "harness_threads": side.base_threads})


def foreign_on_device(ev: Hub) -> str | None:
    """Why work on the device may not be this sandbox's (CUDA): NVML sees more compute
    processes than the judge, its runners and the problem process, or NVML is unavailable
    (then nothing can be attributed). ``None``: every compute process is the sandbox's."""
    from sandbox.tools import nvml

    if ev.nvml_handle is None:
        ev.nvml_handle = ev.nvml()[0]
    if ev.nvml_handle is None:
        return "NVML is unavailable, so the device's processes cannot be counted"
    return nvml.foreign_compute_processes(ev.nvml_handle, 1 + len(ev.sides)
                                          + len(ev.problem.harness_processes()))


def check_beside(ev: Hub, stage: ErrorStage) -> None:
    """Raise when anything but the runners runs under runner uids, or (CUDA) on the GPU.

    Runners started ahead that have loaded no module are the harness's (torch's import
    runs ``ldconfig``): what runs under their uids is not counted. A runner the judge
    cannot see is an infrastructure fault: the count would be blind."""
    from sandbox.tools import nvml

    try:
        waiting = prestart.pending()
        problem = ev.problem.harness_processes()  # the task's problem process: the harness's
        extra = identity.extra_runner_processes(
            {**waiting, **problem, **{s.runner.proc.pid: s.runner.uid for s in ev.sides}},
            harness_uids=frozenset(waiting.values()))
    except identity.IsolationUnavailable as e:
        raise infrastructure(identity.ISOLATION_CODE, str(e)) from None
    if extra and set(problem.values()) & {e.uid for e in extra}:
        raise infrastructure("reference_failed", "the task's problem code left processes "
                             "running beside the timed call: " + identity.describe(extra))
    if extra:
        current = {e.owner for e in extra} == {ev.req.current}
        raise StageFailure(stage, ("current_" if current else "") + "runner_spawned_process",
                           identity.describe(extra),
                           detail={"pids": [e.pid for e in extra][:20]})
    if ev.dev == "cuda":
        if ev.nvml_handle is None:
            ev.nvml_handle = ev.nvml()[0]
        foreign = nvml.foreign_compute_processes(ev.nvml_handle,
                                                 1 + len(ev.sides) + len(problem))
        if foreign is not None:
            raise StageFailure(stage, "foreign_gpu_process", foreign)
