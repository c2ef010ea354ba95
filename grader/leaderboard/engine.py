"""Engines run :class:`~grader.leaderboard.job.Job` s and hand each outcome to the driver.

Both engines call ``on_result`` in the calling (driver) thread only, so the SQLite state
is written by one thread of one process; workers never touch it.

* :class:`LocalEngine`: a thread pool on this machine. With GPUs, one worker per GPU,
  each job pinned to its device (``gpu_ids=(str(i),)``, the sandbox sees only that GPU);
  without, N CPU workers, by default one per two cores (:func:`cpu_workers`). With ``prepare_ahead``, two workers per GPU share the GPU's
  measurement gate (:mod:`grader.backends.gate`): the next evaluation starts its sandbox
  and imports torch while the current one measures, and touches the GPU only after the
  current sandbox is dead.
* :class:`RayEngine`: each job is a Ray task asking for one GPU (``num_gpus=1``; the task
  takes its device from ``ray.get_gpu_ids()``) or one CPU slot, on a cluster the operator
  already runs. A cluster that goes away raises :class:`ClusterLost`; results finished
  before that were already committed.

Interrupted (SIGINT/SIGTERM under the CLI), both stop what they started: the local
engine's running sandboxes are killed by :mod:`grader.backends.stop` and its pending jobs
cancelled; the Ray engine cancels its tasks, each of which stops its own sandbox, and makes sure
nothing of theirs is left on any node (:mod:`grader.leaderboard.ray_stop`).
"""

from __future__ import annotations

import glob
import os
import queue
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Protocol

from grader.backends.gate import MeasureGate
from grader.errors import InfrastructureError, UsageError
from grader.leaderboard.job import Job, JobOutcome, run_job
from grader.leaderboard.ray_cluster import ClusterLost, connect, lost_errors, refused
from grader.leaderboard.ray_stop import SLICE_S, new_group, on_node, stop_tasks

OnResult = Callable[[Job, JobOutcome], None]
# How often a driver with nothing finished asks whether its cluster is still there: well
# inside the 60 s after which Ray's own client ends a driver whose GCS is gone (exit 1, no
# word of kgrader's; seen under load when this was 30 s).
CLUSTER_CHECK_S = 5.0


class Engine(Protocol):
    name: str
    workers: int

    def run(self, jobs: Sequence[Job], on_result: OnResult) -> None: ...


def local_gpus() -> list[str]:
    """NVIDIA device indices visible as /dev/nvidiaN on this machine."""
    ids = [p.removeprefix("/dev/nvidia") for p in glob.glob("/dev/nvidia[0-9]*")]
    return sorted((i for i in ids if i.isdigit()), key=int)


def cpu_workers(cores: int | None = None) -> int:
    """The default number of CPU workers: one per two cores, at least one.

    A CPU evaluation keeps a core busy with its runner's timed calls and another with the
    judge's checks and reference between them; a second evaluation on those cores slows
    both and blurs their timing, so the default never shares them (docs/leaderboard.md)."""
    n = os.cpu_count() if cores is None else cores
    return max(1, (n or 1) // 2)


class LocalEngine:
    """Thread pool; each thread runs one sandboxed evaluation at a time."""

    name = "local"

    def __init__(self, workers: int | None, device: str, prepare_ahead: bool = False,
                 gpus: list[str] | None = None):
        gpus = (local_gpus() if device in ("cuda", "auto") else []) if gpus is None else gpus
        if device == "cuda" and not gpus:
            raise UsageError("--device cuda but no /dev/nvidiaN device on this machine")
        if prepare_ahead and not gpus:
            raise UsageError("--prepare-ahead needs GPU workers: on the CPU, a sandbox that "
                             "prepares would share the cores the measured one is timed on")
        self.slots: queue.Queue[tuple[tuple[str, ...], MeasureGate | None]] = queue.Queue()
        if gpus:
            chosen = gpus[: workers] if workers else gpus
            for g in chosen:
                gate = MeasureGate(f"gpu{g}") if prepare_ahead else None
                for _ in range(2 if prepare_ahead else 1):
                    self.slots.put(((g,), gate))
        else:
            for _ in range(max(1, workers or cpu_workers())):
                self.slots.put(((), None))
        self.workers = self.slots.qsize()

    def _one(self, job: Job) -> JobOutcome:
        slot = self.slots.get()
        try:
            return run_job(job, slot[0], engine=self.name, gate=slot[1])
        finally:
            self.slots.put(slot)

    def run(self, jobs: Sequence[Job], on_result: OnResult) -> None:
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="lb") as pool:
            pending: dict[Future[JobOutcome], Job] = {pool.submit(self._one, j): j for j in jobs}
            try:
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in done:
                        on_result(pending.pop(fut), fut.result())
            except BaseException:
                for fut in pending:
                    fut.cancel()
                raise


def _ray_entry(job: Job, device: str, group: str) -> JobOutcome:
    """Runs on a Ray worker: take the GPU Ray assigned, evaluate, return the outcome."""
    import ray

    gpu_ids = tuple(str(int(g)) for g in ray.get_gpu_ids()) if device == "cuda" else ()
    return on_node(group, run_job, job, gpu_ids, "ray")


class RayEngine:
    """Ray tasks on an existing cluster; the driver commits results as they arrive."""

    name = "ray"

    def __init__(self, address: str, device: str, workers: int | None = None):
        ray_mod: Any = connect(address, "--engine ray")
        self.ray: Any = ray_mod
        self.device = "cuda" if device == "cuda" else "cpu"
        res = ray_mod.cluster_resources()
        key = "GPU" if self.device == "cuda" else "CPU"
        if res.get(key, 0) < 1:
            raise InfrastructureError(f"the Ray cluster at {address!r} offers no {key} "
                                      f"(resources: {res})")
        self.workers = workers or int(res[key])
        opts: dict[str, Any] = {"num_cpus": 1, "max_retries": 0}
        if self.device == "cuda":
            opts["num_gpus"] = 1
        self.remote = ray_mod.remote(**opts)(_ray_entry)
        self.group = new_group()
        self.gcs = str(ray_mod.get_runtime_context().gcs_address or address)

    def run(self, jobs: Sequence[Job], on_result: OnResult) -> None:
        ray = self.ray
        refs: dict[Any, Job] = {}
        checked = time.monotonic()
        try:
            refs.update({self.remote.remote(j, self.device, self.group): j for j in jobs})
            while refs:
                # short slices: ray.wait holds a stop signal's exception until it returns
                done, _ = ray.wait(list(refs), num_returns=1, timeout=SLICE_S)
                if not done:
                    if time.monotonic() - checked >= CLUSTER_CHECK_S:
                        checked = time.monotonic()
                        if refused(self.gcs):  # the head is gone: say so before Ray ends us
                            raise ConnectionError(f"nothing answers at {self.gcs} any more")
                        ray.cluster_resources()  # raises when the cluster is gone
                    continue
                for ref in done:
                    job = refs.pop(ref)
                    try:
                        outcome = ray.get(ref)
                    except ray.exceptions.RayTaskError as e:
                        outcome = JobOutcome(None, f"ray task failed: {e}")
                    on_result(job, outcome)
        except BaseException as e:
            if not isinstance(e, lost_errors(ray)):
                stop_tasks(ray, list(refs), self.group)  # interrupted: the tasks stop too
                raise
            raise ClusterLost(f"the Ray cluster went away mid-run ({type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}); every result "
                              "finished before that is kept in the state; run the same "
                              "command again to resume") from None

    def close(self) -> None:
        self.ray.shutdown()
