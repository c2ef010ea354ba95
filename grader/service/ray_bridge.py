"""The server's Ray driver, in a process of its own (:mod:`grader.service.ray_workers`
starts it): a Ray driver whose cluster went away blocks its calls and, a minute later,
exits its process; the server must keep serving, so that process is this one.

It talks to the server over one :mod:`multiprocessing` pipe. Server to bridge:
``("grade", key, EvalRequest)``, ``("stop",)``. Bridge to server: ``("hello", info)``
once connected (or ``("fatal", message)``), ``("result", key, outcome)`` per job,
``("health", info)`` every :data:`HEARTBEAT_S` seconds. A job's outcome is
``("report", report_json, node)`` or ``("error", error, node)``: the error (as
:func:`error_fields`) a ``KgraderError`` that ``evaluate`` raised on the node (the service
treats it as it treats a local one), or the infrastructure's when the node or its worker
died.

Each job is a Ray task (``num_cpus=1``; with CUDA ``num_gpus=1``, the device taken from
``ray.get_gpu_ids()``, so that a GPU is held by one task at a time) that runs the cold
path, :func:`grader.evaluate.evaluate`, on whichever node Ray picks, from the request the
server built: task spec, reference and candidate as text.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from grader.errors import InfrastructureError, KgraderError, UsageError
from grader.evaluate import EvalRequest, evaluate
from grader.leaderboard.ray_cluster import connect
from grader.leaderboard.ray_stop import new_group, on_node, stop_tasks

HEARTBEAT_S = 2.0
OPTION = "--ray-address"
Outcome = tuple[str, Any, str | None]


def error_fields(e: KgraderError) -> dict[str, Any]:
    """A kgrader error as plain data (any subclass crosses the pipes the same way)."""
    return {"infrastructure": isinstance(e, InfrastructureError), "code": e.code,
            "message": str(e)}


def node_name(node_id: str, host: str) -> str:
    """What a job's ``worker`` says about the node that graded it."""
    return f"ray:{node_id}@{host}"


def grade_on_node(request: EvalRequest, device: str, group: str) -> Outcome:
    """Runs on a Ray worker: take the GPU Ray assigned, evaluate, return the outcome."""
    import ray

    node = node_name(ray.get_runtime_context().get_node_id(), socket.gethostname())
    if device == "cuda":
        gpus = tuple(str(int(g)) for g in ray.get_gpu_ids())
        request = request.model_copy(update={"gpu_ids": gpus})
    try:
        return ("report", on_node(group, evaluate, request).model_dump_json(), node)
    except KgraderError as e:
        return ("error", error_fields(e), node)


def slot_count(resources: dict[str, float], device: str, workers: int | None) -> int:
    """One slot per GPU of the cluster; on the CPU ``workers``, default half its CPUs."""
    if device == "cuda":
        n = int(resources.get("GPU", 0))
        if n < 1:
            raise InfrastructureError(f"--device cuda: the Ray cluster offers no GPU "
                                      f"(resources: {resources})")
        return min(n, workers) if workers else n
    if resources.get("CPU", 0) < 1:
        raise InfrastructureError(f"the Ray cluster offers no CPU (resources: {resources})")
    return workers or max(1, int(resources["CPU"]) // 2)


def resolve_device(device: str, resources: dict[str, float]) -> str:
    if device == "auto":
        return "cuda" if resources.get("GPU", 0) >= 1 else "cpu"
    if device not in ("cpu", "cuda"):
        raise UsageError(f"--ray-address grades on cpu or cuda, not --device {device}")
    return device


def outcome_of_failure(ray: Any, e: BaseException) -> Outcome:
    """A task that raised: ``evaluate``'s own error as it is; anything else (the worker or
    its node died, a kgrader bug on the node) is the infrastructure's."""
    cause = getattr(e, "cause", None)
    if isinstance(e, ray.exceptions.RayTaskError) and isinstance(cause, KgraderError):
        return ("error", error_fields(cause), None)
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return ("error", error_fields(InfrastructureError(
        f"the Ray task grading it failed ({type(e).__name__}: {first})")), None)


class Bridge:
    """One connected driver: tasks in flight, their results, heartbeats."""

    def __init__(self, conn: Connection, ray: Any, device: str):
        self.conn, self.ray, self.device = conn, ray, device
        self.remote = ray.remote(num_cpus=1, num_gpus=1 if device == "cuda" else 0,
                                 max_retries=0)(grade_on_node)
        self.group = new_group()
        self.pending: dict[Any, int] = {}
        self.lock = threading.Lock()
        self._send = threading.Lock()
        self.stop = threading.Event()

    def send(self, msg: tuple[Any, ...]) -> None:
        with self._send:
            self.conn.send(msg)

    def read(self) -> None:
        """The reader thread: submit each job as it comes; ``stop`` or EOF ends the bridge,
        and so does a message it cannot read (the server then fails the jobs in flight as
        the infrastructure's, and starts another bridge)."""
        try:
            while True:
                msg = self.conn.recv()
                if msg[0] != "grade":
                    break
                self.submit(msg[1], msg[2])
        except Exception:  # EOF (the server is gone), or an unreadable message
            pass
        self.stop.set()

    def submit(self, key: int, request: EvalRequest) -> None:
        try:
            ref = self.remote.remote(request, self.device, self.group)
        except Exception as e:  # not submitted: that job's infrastructure failure
            self.send(("result", key, outcome_of_failure(self.ray, e)))
            return
        with self.lock:
            self.pending[ref] = key

    def health(self) -> dict[str, Any]:
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        res = self.ray.cluster_resources()
        return {"nodes": len(nodes), "cpus": res.get("CPU", 0), "gpus": res.get("GPU", 0)}

    def serve(self) -> None:
        threading.Thread(target=self.read, name="kgrader-ray-bridge-read", daemon=True).start()
        beat = 0.0
        while not self.stop.is_set():
            with self.lock:
                refs = list(self.pending)
            if refs:
                done, _ = self.ray.wait(refs, num_returns=1, timeout=0.5)
                for ref in done:
                    self.finish(ref)
            else:
                self.stop.wait(0.2)
            if time.monotonic() - beat >= HEARTBEAT_S:
                beat = time.monotonic()
                self.send(("health", self.health()))
        self.cancel()

    def finish(self, ref: Any) -> None:
        with self.lock:
            key = self.pending.pop(ref)
        try:
            out: Outcome = self.ray.get(ref)
        except Exception as e:
            out = outcome_of_failure(self.ray, e)
        self.send(("result", key, out))

    def cancel(self) -> None:
        """Stopping: cancel what still runs, and leave nothing of it on any node
        (:func:`grader.leaderboard.ray_stop.stop_tasks`, at most ``STOP_BOUND_S``)."""
        with self.lock:
            refs = list(self.pending)
        if refs:
            stop_tasks(self.ray, refs, self.group)


def _orphan_guard(parent: int, connected: threading.Event) -> None:
    """While connecting (``ray.init`` retries for minutes, deaf to the pipe), a server that
    died (SIGKILL: no SIGTERM to its children) ends this process too, rather than leaving a
    driver that connects to a cluster for nobody."""
    while not connected.wait(1.0):
        if os.getppid() != parent:
            os._exit(1)


def main(conn: Connection, address: str, device: str, workers: int | None) -> None:
    """The bridge process's entry (``multiprocessing``, spawned)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops it (pipe or SIGTERM)
    connected = threading.Event()
    threading.Thread(target=_orphan_guard, args=(os.getppid(), connected), daemon=True,
                     name="kgrader-ray-bridge-parent").start()
    try:
        ray = connect(address, OPTION)
        res = {k: float(v) for k, v in ray.cluster_resources().items()}
        device = resolve_device(device, res)
        slots = slot_count(res, device, workers)
        bridge = Bridge(conn, ray, device)
        bridge.send(("hello", {"device": device, "slots": slots, **bridge.health()}))
        connected.set()  # from here a server that died is the pipe's EOF (Bridge.read)
    except Exception as e:  # a typed error for the server's start-up message
        with contextlib.suppress(Exception):
            conn.send(("fatal", error_fields(e if isinstance(e, KgraderError) else
                                             InfrastructureError(f"{type(e).__name__}: {e}"))))
        return
    # SIGTERM (what multiprocessing sends a daemon child when the server exits, however it
    # exits): stop as on "stop", cancelling the tasks, so their sandboxes stop on the nodes.
    signal.signal(signal.SIGTERM, lambda signum, frame: bridge.stop.set())
    try:
        bridge.serve()
    except Exception as e:  # the cluster went away under a call: the server sees EOF
        with contextlib.suppress(Exception):
            bridge.send(("lost", f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"))
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
