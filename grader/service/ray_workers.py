"""``kgrader serve --ray-address``: the service's workers grade on a Ray cluster.

:class:`RayCluster` is the server's link to the cluster: a driver process of its own
(:mod:`grader.service.ray_bridge`), so that a cluster that goes away (which blocks a
driver's calls, then exits its process) never takes the server with it. The cluster
decides the slots: one per GPU of the whole cluster with ``--device cuda``, else
``--workers`` (default half the cluster's CPUs). :class:`RayWorkers` are the service's
:class:`~grader.service.worker.Workers`, one thread per slot, each job graded through
:meth:`RayCluster.grade` (a Ray task running the cold path on whichever node Ray picks);
the job's ``worker`` then names that node (``ray:<node id>@<host>``).

Failures: the node or its worker dying mid-job, or the cluster going away, is the
infrastructure's failure of that job (re-queued up to ``max_attempts``, never a
candidate's verdict); that slot then waits :data:`COOL_S` before its next claim. While
the cluster is unreachable no job is claimed (queued jobs wait, the server keeps serving,
``/v1/health`` says why); a bridge that died is started again every :data:`RECONNECT_S`
seconds (each given :data:`RECONNECT_START_S` for its hello, and each failure logged), so
the workers resume once the cluster is back.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from grader.errors import InfrastructureError, KgraderError, UsageError
from grader.evaluate import EvalRequest
from grader.leaderboard.ray_cluster import ClusterLost, import_ray
from grader.leaderboard.ray_stop import STOP_BOUND_S
from grader.logs import get_logger
from grader.report.model import Report
from grader.service import ray_bridge
from grader.service.store import Claimed
from grader.service.worker import Slot, Workers

log = get_logger("kgrader.service")
START_S = 60.0  # connecting (ray.init, which retries a bad address for minutes) and hello
# A reconnection has nobody waiting on it: its bridge gets longer for its hello (a fresh
# interpreter importing ray and kgrader, then ray.init, may outlast START_S on a loaded
# host; not measured directly).
RECONNECT_START_S = 300.0
STALE_S = 15.0  # no heartbeat for this long: the cluster is unreachable
RECONNECT_S = 30.0
# A slot whose job the infrastructure failed waits this long before it claims again: a
# node that just died is still in Ray's view for a while, and the re-queued job sent
# straight back would die with it (another slot may take it meanwhile).
COOL_S = 20.0


def rebuild(fields: dict[str, Any]) -> KgraderError:
    """The error a bridge sent (:func:`grader.service.ray_bridge.error_fields`)."""
    err: KgraderError = (InfrastructureError if fields.get("infrastructure") else UsageError)(
        str(fields.get("message", "")))
    err.code = str(fields.get("code", err.code))
    return err


@dataclass
class _Link:
    """One bridge process and the pipe to it."""

    proc: BaseProcess
    conn: Connection
    info: dict[str, Any]


class RayCluster:
    """The server's side of the bridge: submit a request, wait for its outcome."""

    def __init__(self, address: str, device: str = "auto", workers: int | None = None, *,
                 bridge: Callable[..., None] = ray_bridge.main):
        import_ray(ray_bridge.OPTION)  # without ray: the same usage error as the leaderboard's
        self.address, self.want_device, self.want_workers = address, device, workers
        self.bridge = bridge  # the bridge process's entry (tests: a fake driver)
        self._lock = threading.Lock()
        self._send = threading.Lock()
        self._futures: dict[int, Future[ray_bridge.Outcome]] = {}
        self._next = 0
        self._closed = threading.Event()
        self.state, self.since = "connecting", time.time()
        self.error: str | None = None
        self.last_beat = time.monotonic()
        link = self._start()  # a bad address is a start-up error (exit 2)
        self.device, self.slots = str(link.info["device"]), int(link.info["slots"])
        self.info: dict[str, Any] = dict(link.info)
        self._link: _Link | None = link
        self._set_state("connected", None)
        threading.Thread(target=self._watch, name="kgrader-ray-watch", daemon=True).start()

    def _start(self, wait_s: float | None = None) -> _Link:
        """Start a bridge and wait up to ``wait_s`` (default :data:`START_S`) for its
        hello; a bridge that cannot connect is an error."""
        wait_s = START_S if wait_s is None else wait_s
        ctx = multiprocessing.get_context("spawn")
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=self.bridge, name="kgrader-ray-bridge", daemon=True,
                           args=(theirs, self.address, self.want_device, self.want_workers))
        proc.start()
        theirs.close()
        try:
            if not mine.poll(wait_s):
                raise InfrastructureError(f"the Ray cluster at {self.address!r} did not answer "
                                          f"within {wait_s:.0f} s",
                                          hint="check the address (ray status on its head)")
            msg = mine.recv()
        except (EOFError, OSError):
            msg = ("fatal", {"infrastructure": True, "code": "infrastructure",
                             "message": f"the Ray driver process exited (code {proc.exitcode})"})
        except BaseException:
            self._end(proc, mine)
            raise
        if msg[0] != "hello":
            self._end(proc, mine)
            raise rebuild(msg[1])
        return _Link(proc, mine, msg[1])

    @staticmethod
    def _end(proc: BaseProcess, conn: Connection, wait_s: float = 2.0) -> None:
        with contextlib.suppress(Exception):
            conn.close()
        proc.join(wait_s)
        if proc.is_alive():
            proc.kill()
            proc.join(5.0)

    def _set_state(self, state: str, error: str | None) -> None:
        if state != self.state:
            (log.info if state == "connected" else log.warning)(
                "service_ray_cluster", state=state, address=self.address, error=error)
            self.state, self.since = state, time.time()
        self.error = error

    # --- the watcher: results, heartbeats, a bridge that died --------------------------
    def _watch(self) -> None:
        while not self._closed.is_set():
            link = self._link
            if link is None:
                self._closed.wait(RECONNECT_S)
                self._reconnect()
                continue
            try:
                if link.conn.poll(1.0):
                    self._receive(link.conn.recv())
                elif time.monotonic() - self.last_beat > STALE_S:
                    self._set_state("unreachable", f"no answer from the Ray driver for "
                                                   f"{STALE_S:.0f} s")
            except (EOFError, OSError):
                self._end(link.proc, link.conn)
                self._lost(link, f"the Ray driver process exited (code "
                                 f"{link.proc.exitcode}): the cluster went away")

    def _receive(self, msg: tuple[Any, ...]) -> None:
        if msg[0] == "health":
            self.last_beat = time.monotonic()
            self.info.update(msg[1])
            self._set_state("connected", None)
        elif msg[0] == "result":
            with self._lock:
                fut = self._futures.pop(msg[1], None)
            if fut is not None:
                fut.set_result(msg[2])
        elif msg[0] == "lost":
            self._set_state("lost", str(msg[1]))

    def _lost(self, link: _Link, why: str) -> None:
        """The bridge is gone: every job in flight is the infrastructure's failure."""
        if self._closed.is_set():
            return
        self._link = None
        self._end(link.proc, link.conn)
        self._set_state("lost", self.error if self.state == "lost" and self.error else why)
        with self._lock:
            futures, self._futures = self._futures, {}
        for fut in futures.values():
            fut.set_exception(ClusterLost(f"the Ray cluster at {self.address!r} went away "
                                          f"while the job ran ({why})"))

    def _reconnect(self) -> None:
        if self._closed.is_set():
            return
        try:
            link = self._start(RECONNECT_START_S)
        except KgraderError as e:
            log.warning("service_ray_reconnect_failed", address=self.address, error=str(e),
                        next_in_s=RECONNECT_S)
            self.error = f"{(self.error or 'lost').split('; reconnecting failed')[0]}; " \
                         f"reconnecting failed: {e}"
            return
        self.info.update(link.info)
        self.last_beat = time.monotonic()
        self._link = link
        self._set_state("connected", None)

    # --- what the workers and the health route call ----------------------------------
    @property
    def alive(self) -> bool:
        return self.state == "connected" and self._link is not None

    def health(self) -> dict[str, Any]:
        return {"address": self.address, "state": self.state, "since": self.since,
                "error": self.error, "device": self.device, "slots": self.slots,
                **{k: self.info[k] for k in ("nodes", "cpus", "gpus") if k in self.info}}

    def grade(self, request: EvalRequest) -> tuple[Report, str | None]:
        """Grade ``request`` on the cluster; the report and the node that made it. Raises
        the node's ``evaluate`` error as a local run would, :class:`ClusterLost` or
        :class:`InfrastructureError` when the cluster or the node failed."""
        if request.work_dir is not None or request.gate is not None:
            raise UsageError("a Ray job carries its request in memory: no work_dir, no gate")
        fut: Future[ray_bridge.Outcome] = Future()
        with self._lock:
            link = self._link
            if link is None or not self.alive:
                raise ClusterLost(f"the Ray cluster at {self.address!r} is {self.state}: "
                                  f"{self.error}")
            key, self._next = self._next, self._next + 1
            self._futures[key] = fut
        try:
            with self._send:
                link.conn.send(("grade", key, request.model_copy(update={"device": self.device})))
        except (OSError, ValueError) as e:
            with self._lock:
                self._futures.pop(key, None)
            raise ClusterLost(f"the Ray driver process is gone ({e})") from None
        kind, payload, node = fut.result()
        if kind == "error":
            raise rebuild(payload)
        return Report.model_validate_json(payload), node

    def close(self) -> None:
        """Stop the bridge (it cancels its tasks, whose sandboxes stop on their nodes)."""
        self._closed.set()
        link, self._link = self._link, None
        if link is None:
            return
        with contextlib.suppress(Exception), self._send:
            link.conn.send(("stop",))
        self._end(link.proc, link.conn, wait_s=STOP_BOUND_S + 5.0)


class RayWorkers(Workers):
    """The service's workers, one per slot of the cluster; each job a Ray task."""

    def __init__(self, cluster: RayCluster, *args: Any, **kwargs: Any):
        self.cluster = cluster
        self._node = threading.local()  # this worker thread's slot and job's node
        self._cool: dict[str, float] = {}
        super().__init__(*args, grader=self._grade, **kwargs)

    def _grade(self, request: EvalRequest) -> Report:
        try:
            report, self._node.name = self.cluster.grade(request)
        except InfrastructureError:
            self._cool_down()
            raise
        if report.infrastructure_failed():
            self._cool_down()
        return report

    def _cool_down(self) -> None:
        slot = getattr(self._node, "slot", None)
        if slot is not None:
            self._cool[slot] = time.monotonic() + COOL_S

    def ready(self, slot: Slot) -> bool:
        return self.cluster.alive and time.monotonic() >= self._cool.get(slot.name, 0.0)

    def health(self) -> dict[str, Any]:
        return {"ok": self.cluster.alive, "ray": self.cluster.health()}

    kills_on_cancel = False  # the request is shipped to a node: no event crosses

    def run_one(self, c: Claimed, slot: Slot) -> None:
        self._node.name, self._node.slot = None, slot.name
        super().run_one(c, slot)

    def _finish(self, c: Claimed, state: str, v: str | None, report_json: str | None,
                error: str | None, best_source: str | None = None, best_was: str = "") -> bool:
        node = getattr(self._node, "name", None)
        ok = self.store.finish(c.job.id, c.attempt, state=state, verdict=v,
                               report_json=report_json, error=error, best_source=best_source,
                               worker=node, best_was=best_was)
        log.info("service_job_finished", job=c.job.id, state=state, verdict=v, recorded=ok,
                 node=node)
        return ok


def slots_for(cluster: RayCluster, backend: str) -> list[Slot]:
    """The workers' slots: named ``ray0``, ``ray1``, ... (the node is known per job)."""
    return [Slot(f"ray{i}", backend, cluster.device) for i in range(cluster.slots)]
