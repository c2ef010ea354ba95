"""``kgrader serve --ray-address`` on a real two-node Ray cluster on this host
(``ray.cluster_utils.Cluster``: a head and one more node, one CPU and a custom resource
each), a real server subprocess, real evaluations in bwrap on the CPU:

* four jobs (good and wrong) are each graded once, with the right verdict, and the jobs'
  ``worker`` names both nodes;
* the second node killed while its job runs in a sandbox there: that job is re-queued (an
  infrastructure failure, never a candidate verdict) and graded on the head (or, its
  attempts spent, ``failed`` with the infrastructure's error and no verdict);
* the head killed: ``/v1/health`` says the cluster is gone, the server keeps serving and
  accepting submissions, which wait queued instead of failing; a new head on the same
  address, and the server grades them there;
* a SIGTERM to the server cancels its Ray tasks: no sandbox is left on the nodes (a
  SIGKILL: its driver process cancels them when its pipe closes);
* an address where no cluster answers is a typed error at start-up (exit 2).
"""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests

from grader.service.store import JobRow, Store
from tests.e2e._backends import backend_or_skip
from tests.e2e._ray import LOOPBACK, patient_node_start, quiet_env
from tests.e2e.test_service_e2e import TASK, Server, _kgrader

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]
CANDIDATES = TASK / "candidates"


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    pytest.importorskip("ray", reason="ray is not installed (pip install ray)")
    from ray.cluster_utils import Cluster

    for name, value in quiet_env({}).items():  # the nodes, and the server's bridge
        monkeypatch.setenv(name, value)
    patient_node_start(monkeypatch)  # a loaded host's raylet may register after Ray's 30 s
    # Every node on loopback (the server's bridge connects there, and stays there).
    c: Any = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"kg_head": 1}, "include_dashboard": False,
        "node_ip_address": LOOPBACK})
    c.add_node(num_cpus=1, resources={"kg_second": 1}, node_ip_address=LOOPBACK)
    try:
        assert c.address.startswith(f"{LOOPBACK}:"), c.address
        c.wait_for_nodes()
        yield c
    finally:
        c.shutdown()


def _shrink(server: Server) -> None:
    """vector_add_small with few samples: one evaluation takes seconds on 2 cores."""
    path = server.tasks / TASK.name / "task.json"
    spec = json.loads(path.read_text())
    spec.update(benchmark={"warmup": 1, "samples": 3, "reps": 1, "cache": "hot"},
                shapes={"tune": [{"M": 8, "N": 256}], "hidden": [{"M": 3, "N": 100}]})
    path.write_text(json.dumps(spec))


@pytest.fixture
def server(tmp_path: Path, cluster: Any) -> Iterator[Server]:
    backend_or_skip("bwrap")
    srv = Server(tmp_path, "--ray-address", cluster.address, "--workers", "2")
    _shrink(srv)
    yield srv
    srv.stop(signal.SIGKILL)


def _submit(server: Server, tok: str, cand: str) -> str:
    r = requests.post(server.url + "/v1/submissions", timeout=30,
                      headers={"Authorization": f"Bearer {tok}"},
                      json={"task": TASK.name, "mode": "run",
                            "source": (CANDIDATES / f"{cand}.py").read_text()})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _jobs(server: Server) -> dict[str, JobRow]:
    return {j.id: j for j in Store(server.data / "service.sqlite").jobs()}


def _wait(server: Server, ids: list[str], states: tuple[str, ...],
          timeout: float) -> dict[str, JobRow]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = _jobs(server)
        if all(jobs[i].state in states for i in ids):
            return jobs
        assert server.proc is not None and server.proc.poll() is None, server.log.read_text()
        time.sleep(0.3)
    raise AssertionError(f"not all {states}: {[(j.id, j.state) for j in _jobs(server).values()]}"
                         + server.log.read_text()[-3000:])


def _node(worker: str | None) -> str:
    assert worker is not None and worker.startswith("ray:"), worker
    return worker[4:].split("@")[0]


def _health(server: Server) -> dict[str, Any]:
    out: dict[str, Any] = requests.get(server.url + "/v1/health", timeout=10).json()
    return out


def _sandbox_under(pid: int) -> bool:
    """A sandbox (bwrap) runs among the descendants of ``pid`` (a node's raylet)."""
    try:
        return any(p.name() == "bwrap" for p in psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return False


def test_jobs_are_graded_once_each_with_their_verdict_on_both_nodes(
        server: Server, cluster: Any) -> None:
    tok = server.token("alice")
    server.start()
    health = _health(server)
    assert health["ok"] and health["workers"] == 2 and health["ray"]["nodes"] == 2
    cands = ["good", "wrong", "good", "wrong"]
    ids = [_submit(server, tok, c) for c in cands]
    jobs = _wait(server, ids, ("done", "failed"), 170)
    for job_id, cand in zip(ids, cands, strict=True):
        j = jobs[job_id]
        assert (j.state, j.verdict, j.grades) == \
            ("done", "passed" if cand == "good" else "failed", 1), j
    nodes = {_node(jobs[i].worker) for i in ids}
    assert nodes == {n.node_id for n in cluster.list_all_nodes()}  # both nodes graded
    report = Store(server.data / "service.sqlite").report_json(ids[0])
    assert report is not None and json.loads(report)["sandbox"]["backend"] == "bwrap"


def test_a_node_killed_mid_job_re_queues_it_and_the_head_grades_it(
        server: Server, cluster: Any) -> None:
    tok = server.token("alice")
    server.start()
    second = next(n for n in cluster.list_all_nodes() if n is not cluster.head_node)
    raylet = second.all_processes["raylet"][0].process.pid
    ids = [_submit(server, tok, "good"), _submit(server, tok, "wrong")]
    deadline = time.monotonic() + 120
    while not _sandbox_under(raylet):  # a job's sandbox runs on the second node
        assert time.monotonic() < deadline, server.log.read_text()[-3000:]
        assert not any(j.state in ("done", "failed") for j in _jobs(server).values()), \
            "a job finished before the second node's sandbox was seen"
        time.sleep(0.1)
    cluster.remove_node(second, allow_graceful=False)
    jobs = _wait(server, ids, ("done", "failed"), 170)
    store = Store(server.data / "service.sqlite")
    history = {i: [(e[2], e[3]) for e in store.events(i)] for i in ids}
    # The job running on the killed node (and one Ray had queued there, if it had) was
    # re-queued; none of them got a verdict from the dead node.
    retried = [i for i in ids if jobs[i].attempts == 2]
    assert retried, history
    head = cluster.head_node.node_id
    for job_id, cand in zip(ids, ["good", "wrong"], strict=True):
        j = jobs[job_id]
        right = "passed" if cand == "good" else "failed"
        if job_id in retried and j.state == "failed":  # its attempts ran out: no verdict
            assert j.verdict is None and j.grades == 0 and j.error is not None, history
            assert "Ray task" in j.error, history
            continue
        assert (j.state, j.verdict, j.grades) == ("done", right, 1), history
        if job_id in retried:
            assert _node(j.worker) == head, history  # the only node left graded it
    for job_id in retried:
        assert [k for k, _ in history[job_id]][:4] == ["queued", "running", "requeued",
                                                       "running"], history
        why = history[job_id][2][1]["why"]
        assert why.startswith("infrastructure: the Ray task grading it failed (NodeDiedError"), \
            why
    deadline = time.monotonic() + 60  # Ray's own health check declares the node dead
    while _health(server)["ray"]["nodes"] != 1:
        assert time.monotonic() < deadline, _health(server)
        time.sleep(0.5)
    assert _health(server)["ok"]  # the cluster itself is still there


def test_a_lost_cluster_is_said_on_health_and_jobs_wait_queued(
        server: Server, cluster: Any) -> None:
    tok = server.token("alice")
    server.start()
    ids = [_submit(server, tok, "good")]
    _wait(server, ids, ("running", "done"), 60)
    cluster.remove_node(cluster.head_node, allow_graceful=False)
    deadline = time.monotonic() + 60
    while _health(server)["ok"]:
        assert time.monotonic() < deadline, "health still ok 60 s after the head died"
        time.sleep(0.5)
    health = _health(server)
    assert health["ray"]["state"] in ("unreachable", "lost") and health["ray"]["error"]
    later = _submit(server, tok, "wrong")  # the server keeps taking submissions
    # The job that was running ends re-queued or failed by the infrastructure, never graded.
    jobs = _wait(server, ids, ("queued", "failed", "done"), 150)
    j = jobs[ids[0]]
    if j.state != "done":  # (done: it finished before the head died; nothing to check)
        assert j.verdict is None and j.grades == 0
        assert "ray_cluster_lost" in " ".join(str(e[3]) for e in
                                              Store(server.data / "service.sqlite").events(j.id))
    time.sleep(3)
    assert _jobs(server)[later].state == "queued"  # no claim while the cluster is gone
    assert _health(server)["ray"]["state"] == "lost" and server.proc is not None \
        and server.proc.poll() is None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_stopped_server_stops_the_sandboxes_of_its_jobs_on_the_nodes(
        server: Server, cluster: Any, sig: signal.Signals) -> None:
    tok = server.token("alice")
    server.start()
    raylets = [n.all_processes["raylet"][0].process.pid for n in cluster.list_all_nodes()]
    ids = [_submit(server, tok, "good"), _submit(server, tok, "wrong")]
    deadline = time.monotonic() + 120
    while not any(_sandbox_under(r) for r in raylets):
        assert time.monotonic() < deadline, server.log.read_text()[-3000:]
        time.sleep(0.1)
    assert server.proc is not None
    server.proc.send_signal(sig)
    code = server.proc.wait(60)
    if sig == signal.SIGTERM:  # its Ray tasks were cancelled before it exited
        assert code == 128 + signal.SIGTERM, server.log.read_text()[-3000:]
        assert not any(_sandbox_under(r) for r in raylets)
    else:  # its driver process saw the pipe close, and cancelled them
        deadline = time.monotonic() + 40
        while any(_sandbox_under(r) for r in raylets):
            assert time.monotonic() < deadline, "a sandbox outlived a SIGKILLed server"
            time.sleep(0.2)
    jobs = _jobs(server)
    assert all(jobs[i].state in ("running", "done") and jobs[i].grades <= 1 for i in ids)


def test_a_bad_ray_address_is_a_clear_error_at_start_up(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray is not installed (pip install ray)")
    srv = Server(tmp_path)
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for extra, says in ((("--ray-address", f"127.0.0.1:{port}"),
                         "cannot connect to the Ray cluster"),
                        (("--ray-address", "127.0.0.1:1", "--warm", "1"), "--warm")):
        r = _kgrader("serve", "--tasks", str(srv.tasks), "--data", str(tmp_path / "data"),
                     "--device", "cpu", *extra, timeout=120)
        assert r.returncode == 2, r.stderr
        assert says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_server_grades_again_once_the_cluster_is_back(server: Server, cluster: Any) -> None:
    from ray.cluster_utils import Cluster

    tok = server.token("alice")
    server.start()
    port = int(cluster.address.rsplit(":", 1)[1])
    # The bridge connects after the HTTP server is up (a loaded host: seconds later); a first
    # connection that finds nothing is a refused start-up (exit 2), not a lost cluster.
    deadline = time.monotonic() + 120
    while _health(server)["ray"]["state"] != "connected":
        assert time.monotonic() < deadline, _health(server)
        time.sleep(0.5)
    for node in list(cluster.worker_nodes):
        cluster.remove_node(node, allow_graceful=False)
    cluster.remove_node(cluster.head_node, allow_graceful=False)
    deadline = time.monotonic() + 120  # unreachable at once, lost when the driver exits
    while _health(server)["ray"]["state"] != "lost":
        assert time.monotonic() < deadline, _health(server)
        time.sleep(1)
    job = _submit(server, tok, "good")
    time.sleep(2)
    queued = _jobs(server)[job]
    assert (queued.state, queued.attempts) == ("queued", 0), queued  # no attempt spent on a lost cluster
    back: Any = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "gcs_server_port": port, "include_dashboard": False,
        "node_ip_address": LOOPBACK})
    try:
        assert back.address.endswith(f":{port}")
        j = _wait(server, [job], ("done", "failed"), 150)[job]
        # More than one attempt only where the host's load spoiled the timing (an
        # infrastructure fault, re-queued): seen beside two evaluations per core.
        assert (j.state, j.verdict) == ("done", "passed") and j.attempts >= 1, j
        assert _node(j.worker) == back.head_node.node_id
        assert _health(server)["ok"] and _health(server)["ray"]["state"] == "connected"
    finally:
        back.shutdown()
