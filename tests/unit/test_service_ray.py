"""The service's Ray workers without a cluster: the slots a cluster gives, how a task's
failure is classified, and the server's side of the bridge against a fake driver process
(a real spawned process and pipe, no Ray): a bad address is a typed start-up error, a
driver that dies fails its job as the infrastructure's and is started again, a silent one
stops the claims. The real cluster is in tests/e2e/test_service_ray.py."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import psutil
import pytest

from grader.errors import InfrastructureError, KgraderError, UsageError
from grader.evaluate import EvalRequest
from grader.leaderboard.ray_cluster import ClusterLost, import_ray
from grader.leaderboard.seeds import Secret
from grader.report.model import Report
from grader.service import ray_workers
from grader.service.ray_bridge import (
    Bridge,
    error_fields,
    outcome_of_failure,
    resolve_device,
    slot_count,
)
from grader.service.ray_workers import RayCluster, RayWorkers, rebuild, slots_for
from grader.service.store import Store
from grader.service.worker import ServiceTask, build_request, load_tasks

TASK = Path(__file__).resolve().parents[2] / "examples" / "vector_add_small"
GOOD = (TASK / "candidates" / "good.py").read_text()


def test_the_cluster_decides_the_slots() -> None:
    assert slot_count({"CPU": 4.0, "GPU": 3.0}, "cuda", None) == 3  # one per GPU of the cluster
    assert slot_count({"CPU": 4.0, "GPU": 3.0}, "cuda", 2) == 2
    assert slot_count({"CPU": 4.0}, "cpu", None) == 2  # half the CPUs
    assert slot_count({"CPU": 1.0}, "cpu", None) == 1  # at least one
    assert slot_count({"CPU": 2.0}, "cpu", 5) == 5
    with pytest.raises(InfrastructureError, match="no GPU"):
        slot_count({"CPU": 8.0}, "cuda", None)
    assert resolve_device("auto", {"GPU": 1.0}) == "cuda"
    assert resolve_device("auto", {"CPU": 2.0}) == "cpu"
    with pytest.raises(UsageError, match="rocm"):
        resolve_device("rocm", {"CPU": 2.0})


def test_errors_cross_the_pipes_with_their_family_and_code() -> None:
    infra = rebuild(error_fields(InfrastructureError("no bwrap", code="sandbox_unavailable")))
    assert isinstance(infra, InfrastructureError) and infra.code == "sandbox_unavailable"
    job = rebuild(error_fields(UsageError("bad task", code="bad_task")))
    assert isinstance(job, UsageError) and not isinstance(job, InfrastructureError)
    assert job.code == "bad_task" and str(job) == "bad task"


def test_a_dead_worker_is_the_infrastructures_and_evaluates_own_error_is_kept() -> None:
    ray: Any = pytest.importorskip("ray")
    kind, fields, _ = outcome_of_failure(ray, ray.exceptions.WorkerCrashedError())
    assert kind == "error" and fields["infrastructure"] and fields["code"] == "infrastructure"
    assert "WorkerCrashedError" in fields["message"]
    err = ray.exceptions.RayTaskError("grade_on_node", "tb", UsageError("bad", code="bad_task"))
    kind, fields, _ = outcome_of_failure(ray, err)
    assert (fields["infrastructure"], fields["code"]) == (False, "bad_task")
    bug = ray.exceptions.RayTaskError("grade_on_node", "tb", ZeroDivisionError("x"))
    assert outcome_of_failure(ray, bug)[1]["infrastructure"]  # a kgrader bug: retried


def test_without_ray_the_option_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "ray", None)
    with pytest.raises(UsageError, match=r"--ray-address needs the ray package"):
        import_ray("--ray-address")
    with pytest.raises(UsageError, match=r"--ray-address needs the ray package"):
        RayCluster("127.0.0.1:6379", "cpu")


# --- a fake driver process: the address says how it behaves ---------------------------------
def fake_bridge(conn: Connection, address: str, device: str, workers: int | None) -> None:
    if address == "fatal":
        conn.send(("fatal", error_fields(InfrastructureError("cannot connect to the Ray "
                                                             "cluster at 'fatal': refused"))))
        return
    if address == "silent":
        time.sleep(30)
        return
    if address.startswith("slow:"):  # a hello at once the first time, 2 s late after
        marker = Path(address[5:])
        if marker.exists():
            time.sleep(2.0)
        marker.touch()
    conn.send(("hello", {"device": "cpu", "slots": workers or 2, "nodes": 2, "cpus": 2.0,
                         "gpus": 0.0}))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "stop":
            return
        req: EvalRequest = msg[2]
        if "DIE" in req.candidate.text:
            os._exit(3)  # the driver (or the cluster under it) is gone
        if address != "mute":
            conn.send(("health", {"nodes": 2}))
        report = Report(ok=False, stage="compile", task=req.task.name)
        conn.send(("result", msg[1], ("report", report.model_dump_json(), "ray:n1@host")))


@pytest.fixture
def task(tmp_path: Path) -> ServiceTask:
    pytest.importorskip("ray")
    shutil.copytree(TASK, tmp_path / "tasks" / TASK.name)
    return load_tasks(tmp_path / "tasks", Secret(b"s" * 32, "test"))[TASK.name]


def _request(task: ServiceTask, source: str = GOOD) -> EvalRequest:
    return build_request("run", source, task, slots_for_cpu()[0], "j" * 32, None)


def slots_for_cpu() -> Any:
    from grader.service.worker import Slot

    return [Slot("ray0", "bwrap", "cpu")]


def test_a_bad_address_is_a_typed_start_up_error(task: ServiceTask,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InfrastructureError, match=r"cannot connect.*refused"):
        RayCluster("fatal", "cpu", bridge=fake_bridge)
    monkeypatch.setattr(ray_workers, "START_S", 1.0)
    t0 = time.monotonic()
    with pytest.raises(InfrastructureError, match="did not answer within 1 s"):
        RayCluster("silent", "cpu", bridge=fake_bridge)
    assert time.monotonic() - t0 < 10  # the silent driver was killed, not waited for


def test_a_driver_that_dies_fails_its_job_as_infrastructure_and_comes_back(
        task: ServiceTask, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_workers, "RECONNECT_S", 0.5)
    cluster = RayCluster("ok", "cpu", 3, bridge=fake_bridge)
    try:
        assert cluster.slots == 3 and [s.name for s in slots_for(cluster, "bwrap")] == \
            ["ray0", "ray1", "ray2"]
        report, node = cluster.grade(_request(task))
        assert report.stage == "compile" and node == "ray:n1@host"
        with pytest.raises(ClusterLost, match="went away while the job ran"):
            cluster.grade(_request(task, GOOD + "\n# DIE\n"))
        assert not cluster.alive and cluster.health()["state"] == "lost"
        with pytest.raises(ClusterLost):  # no new job while it is gone
            cluster.grade(_request(task))
        deadline = time.monotonic() + 30
        while not cluster.alive and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cluster.alive and cluster.health()["state"] == "connected"  # a new driver
        assert cluster.grade(_request(task))[1] == "ray:n1@host"
    finally:
        cluster.close()


def test_a_reconnection_waits_longer_for_its_hello_than_start_up(
        task: ServiceTask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # On a loaded host a new driver's hello comes late: start-up would refuse it, but a
    # reconnection (nobody waits on it) takes it, rather than killing it every time.
    monkeypatch.setattr(ray_workers, "RECONNECT_S", 0.2)
    monkeypatch.setattr(ray_workers, "RECONNECT_START_S", 20.0)
    cluster = RayCluster(f"slow:{tmp_path / 'started'}", "cpu", 1, bridge=fake_bridge)
    monkeypatch.setattr(ray_workers, "START_S", 1.0)  # what start-up would wait from now
    try:
        with pytest.raises(ClusterLost):
            cluster.grade(_request(task, GOOD + "\n# DIE\n"))
        t0 = time.monotonic()
        while not cluster.alive and time.monotonic() - t0 < 30:
            time.sleep(0.1)
        assert cluster.alive and time.monotonic() - t0 >= 2.0, cluster.health()
        assert "reconnecting failed" not in str(cluster.health()["error"])
    finally:
        cluster.close()


def test_a_connecting_driver_ends_when_its_server_is_killed(tmp_path: Path) -> None:
    # While ray.init retries it hears nothing on its pipe: a server gone by SIGKILL must
    # not leave it connecting for nobody.
    script = (
        "import os, sys, threading\n"
        "from grader.service.ray_bridge import _orphan_guard\n"
        "if os.fork() == 0:\n"
        "    print(os.getpid(), flush=True)\n"
        "    _orphan_guard(os.getppid(), threading.Event())\n"
        "    os._exit(0)\n"
        "import time; time.sleep(1.0); os._exit(9)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, cwd=Path(__file__).resolve().parents[2])
    child = int(out.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(child).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the orphaned driver is still running")


def test_a_silent_driver_is_unreachable_and_no_job_is_claimed(
        task: ServiceTask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_workers, "STALE_S", 0.3)
    cluster = RayCluster("mute", "cpu", 1, bridge=fake_bridge)
    try:
        time.sleep(1.5)
        assert not cluster.alive and cluster.health()["state"] == "unreachable"
        store = Store(tmp_path / "s.sqlite")
        workers = RayWorkers(cluster, store, {task.name: task}, slots_for(cluster, "bwrap"))
        assert not workers.ready(workers.slots[0])
        assert workers.health()["ok"] is False and workers.health()["ray"]["state"] == \
            "unreachable"
    finally:
        cluster.close()


class FakeCluster:
    """What RayWorkers needs of a cluster: a grade call that fails as the test says."""

    alive = True
    device = "cpu"
    slots = 1

    def __init__(self, fail: KgraderError | None):
        self.fail = fail

    def grade(self, request: EvalRequest) -> tuple[Report, str | None]:
        if self.fail is not None:
            raise self.fail
        return Report(ok=False, stage="compile", task=request.task.name), "ray:abc@node2"

    def health(self) -> dict[str, Any]:
        return {"state": "connected"}


def _submit(store: Store) -> str:
    job = store.submit(token_id="t", task=TASK.name, mode="run", label="", source=GOOD,
                       source_sha="x", view_sha="y", max_active=9, max_per_day=9)
    assert not isinstance(job, str)
    return job.id


def test_workers_record_the_node_and_requeue_a_lost_cluster_never_a_verdict(
        task: ServiceTask, tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite")
    tasks = {task.name: task}
    ok = RayWorkers(FakeCluster(None), store, tasks, slots_for(FakeCluster(None), "bwrap"))  # type: ignore[arg-type]
    job = _submit(store)
    claimed = store.claim("ray0")
    assert claimed is not None
    ok.run_one(claimed, ok.slots[0])
    row = store.job(job)
    assert row is not None and row.state == "done" and row.worker == "ray:abc@node2"

    lost = RayWorkers(FakeCluster(ClusterLost("the cluster went away")), store, tasks,  # type: ignore[arg-type]
                      slots_for(FakeCluster(None), "bwrap"), max_attempts=2,  # type: ignore[arg-type]
                      retry_backoff_s=0.0)
    job = _submit(store)
    for attempt in (1, 2):
        claimed = store.claim("ray0")
        assert claimed is not None and claimed.attempt == attempt
        lost.run_one(claimed, lost.slots[0])
    assert not lost.ready(lost.slots[0])  # cooling down after the infrastructure's failure
    assert ok.ready(ok.slots[0])
    row = store.job(job)
    assert row is not None and row.state == "failed" and row.verdict is None
    assert row.error is not None and row.error.startswith("ray_cluster_lost:")
    assert row.worker == "ray0"  # no node graded it
    assert [e[2] for e in store.events(job)] == ["queued", "running", "requeued", "running",
                                                  "failed"]


class FakeRay:
    """Just enough of the ray module for a Bridge: tasks finish at once, except those whose
    candidate says HANG; one whose candidate says NOLEASE cannot be submitted."""

    def __init__(self) -> None:
        import ray

        self.exceptions = ray.exceptions
        self.opts: dict[str, Any] = {}
        self.results: dict[object, Any] = {}
        self.hanging: list[object] = []
        self.cancelled: list[object] = []

    def remote(self, **opts: Any) -> Any:
        self.opts = opts
        fake = self

        class Remote:
            def remote(self, request: EvalRequest, device: str, group: str) -> object:
                assert group.startswith("ray-")
                if "NOLEASE" in request.candidate.text:
                    raise RuntimeError("no lease")
                ref = object()
                if "HANG" in request.candidate.text:
                    fake.hanging.append(ref)
                fake.results[ref] = ("report", f"{device}", "ray:n1@host")
                return ref

        return lambda fn: Remote()

    def wait(self, refs: list[object], num_returns: int, timeout: float) -> Any:
        done = [r for r in refs if r not in self.hanging][:num_returns]
        return done, [r for r in refs if r not in done]

    def get(self, ref: object) -> Any:
        return self.results[ref]

    def nodes(self) -> list[dict[str, Any]]:
        return [{"Alive": True}, {"Alive": False}]

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2.0}

    def cancel(self, ref: object, force: bool) -> None:
        """A cooperative task: a cancel settles it (its clean-up ran)."""
        self.cancelled.append(ref)
        if ref in self.hanging:
            self.hanging.remove(ref)


def test_the_bridge_submits_answers_each_job_beats_and_cancels_on_stop(
        task: ServiceTask) -> None:
    ray = FakeRay()
    mine, theirs = multiprocessing.Pipe()
    bridge = Bridge(theirs, ray, "cpu")
    assert ray.opts == {"num_cpus": 1, "num_gpus": 0, "max_retries": 0}
    gpu = FakeRay()
    Bridge(theirs, gpu, "cuda")
    assert gpu.opts["num_gpus"] == 1  # a GPU is one task's at a time
    t = threading.Thread(target=bridge.serve)
    t.start()
    for key, text in enumerate((GOOD, GOOD + "\n# NOLEASE\n", GOOD + "\n# HANG\n")):
        mine.send(("grade", key, _request(task, text)))
    results: dict[int, Any] = {}
    beats: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    # ...and the hanging job submitted (on a loaded host it can come after the other two
    # results): the stop below must find it running.
    while (len(results) < 2 or not beats or not ray.hanging) and time.monotonic() < deadline:
        if mine.poll(0.2):
            msg = mine.recv()
            if msg[0] == "result":
                results[msg[1]] = msg[2]
            elif msg[0] == "health":
                beats.append(msg[1])
    assert results[0] == ("report", "cpu", "ray:n1@host")
    kind, fields, node = results[1]
    assert kind == "error" and fields["infrastructure"] and "no lease" in fields["message"]
    assert node is None
    assert 2 not in results and beats[0]["nodes"] == 1  # still running; live nodes only
    running = list(ray.hanging)
    assert len(running) == 1, running
    mine.send(("stop",))
    t.join(10)
    assert not t.is_alive() and ray.cancelled == running  # the running one cancelled
