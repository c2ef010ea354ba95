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
from sandbox.judge.device import open_nvml
from sandbox.judge.hub import Hub, SideLike
from sandbox.launcher import caps, identity

# How long an NVML count above the sandbox's own may take to come down before it is
# another job's (a closed runner's CUDA context leaves the driver as its process exits).
FOREIGN_SETTLE_S = 0.5


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
        ev.nvml_handle = open_nvml(ev.dev)[0]
    if ev.nvml_handle is None:
        return "NVML is unavailable, so the device's processes cannot be counted"
    return nvml.foreign_compute_processes(ev.nvml_handle, 1 + len(ev.sides)
                                          + len(ev.problem.harness_processes()))


def _extra_beside(ev: Hub, problem: dict[int, int]) -> list[identity.ExtraProcess]:
    """Processes under runner uids beyond the runners themselves (and the problem process)."""
    try:
        waiting = prestart.pending()
        return identity.extra_runner_processes(
            {**waiting, **problem, **{s.runner.proc.pid: s.runner.uid for s in ev.sides}},
            harness_uids=frozenset(waiting.values()))
    except identity.IsolationUnavailable as e:
        raise infrastructure(identity.ISOLATION_CODE, str(e)) from None


def _raise_extra(ev: Hub, stage: ErrorStage, extra: list[identity.ExtraProcess],
                 problem: dict[int, int]) -> None:
    if not extra:
        return
    if set(problem.values()) & {e.uid for e in extra}:
        raise infrastructure("reference_failed", "the task's problem code left processes "
                             "running beside the timed call: " + identity.describe(extra))
    current = {e.owner for e in extra} == {ev.req.current}
    raise StageFailure(stage, ("current_" if current else "") + "runner_spawned_process",
                       identity.describe(extra), detail={"pids": [e.pid for e in extra][:20]})


def check_beside(ev: Hub, stage: ErrorStage) -> None:
    """Raise when anything but the runners runs under runner uids, or (CUDA) on the GPU.

    Runners started ahead that have loaded no module are the harness's (torch's import
    runs ``ldconfig``): what runs under their uids is not counted. A runner the judge
    cannot see is an infrastructure fault: the count would be blind. A compute process on
    the GPU beyond the sandbox's own, when no process of the sandbox is extra, is another
    job's (``foreign_gpu_process``, infrastructure): every process the candidate can start
    runs in this sandbox's pid namespace under a runner uid, where the scan sees it."""
    from sandbox.tools import nvml

    problem = ev.problem.harness_processes()  # the task's problem process: the harness's
    _raise_extra(ev, stage, _extra_beside(ev, problem), problem)
    if ev.dev != "cuda":
        return
    if ev.nvml_handle is None:
        ev.nvml_handle = open_nvml(ev.dev)[0]
    expected = 1 + len(ev.sides) + len(problem)
    foreign = nvml.foreign_compute_processes(ev.nvml_handle, expected)
    deadline = time.monotonic() + FOREIGN_SETTLE_S
    while foreign is not None and time.monotonic() < deadline:
        time.sleep(0.02)  # a runner closed just before may still be leaving the driver
        foreign = nvml.foreign_compute_processes(ev.nvml_handle, expected)
    if foreign is None:
        return
    _raise_extra(ev, stage, _extra_beside(ev, problem), problem)  # one started since: its
    raise StageFailure(stage, "foreign_gpu_process",
                       f"{foreign}; no process of this sandbox beyond the judge, its runners "
                       "and the problem process: another job computes on this device, so no "
                       "timing of it can be trusted", origin="infrastructure")
