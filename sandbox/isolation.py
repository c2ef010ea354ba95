"""What may run beside a timed call: only the runners themselves.

Checked after every benchmark and accept call (``Evaluation`` calls :func:`check_beside`):
each runner uid owns exactly its one process (a helper, a grandchild or a zombie under a
runner uid is work the candidate started that could run during timing), and on CUDA no
compute process besides the judge and its runners holds the GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox import prestart
from sandbox.failure import StageFailure, infrastructure
from sandbox.wire import ErrorStage

if TYPE_CHECKING:
    from sandbox.evaluation import Evaluation


def check_beside(ev: Evaluation, stage: ErrorStage) -> None:
    """Raise when anything but the runners runs under runner uids, or (CUDA) on the GPU.

    Runners started ahead that have loaded no module are the harness's (torch's import
    runs ``ldconfig``): what runs under their uids is not counted. A runner the judge
    cannot see is an infrastructure fault: the count would be blind."""
    from sandbox import identity, nvml

    try:
        waiting = prestart.pending()
        extra = identity.extra_runner_processes(
            {**waiting, **{s.runner.proc.pid: s.runner.uid for s in ev.sides}},
            harness_uids=frozenset(waiting.values()))
    except identity.IsolationUnavailable as e:
        raise infrastructure(identity.ISOLATION_CODE, str(e)) from None
    if extra:
        current = {e.owner for e in extra} == {ev.req.current}
        raise StageFailure(stage, ("current_" if current else "") + "runner_spawned_process",
                           identity.describe(extra),
                           detail={"pids": [e.pid for e in extra][:20]})
    if ev.dev == "cuda":
        if ev.nvml_handle is None:
            ev.nvml_handle = ev.nvml()[0]
        foreign = nvml.foreign_compute_processes(ev.nvml_handle, 1 + len(ev.sides))
        if foreign is not None:
            raise StageFailure(stage, "foreign_gpu_process", foreign)
