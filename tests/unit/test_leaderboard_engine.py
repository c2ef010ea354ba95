"""Engines without sandboxes: the driver gets every result; a lost Ray cluster is a clear error."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from grader.leaderboard import engine as eng
from grader.leaderboard.job import Job, JobOutcome
from grader.leaderboard.ray_cluster import refused
from grader.leaderboard.seeds import Secret, task_payload

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def jobs(n: int) -> list[Job]:
    tp = task_payload(EXAMPLES / "vector_add_small", Secret(b"k" * 32, "test"))
    return [Job(f"s{i}", tp, "sha", "main", "src") for i in range(n)]


def test_local_engine_hands_every_outcome_to_the_driver_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    seen_slots: list[tuple[str, ...]] = []

    def fake_run(job: Job, slot: tuple[str, ...], engine: str, gate: Any = None) -> JobOutcome:
        seen_slots.append(slot)
        return JobOutcome(None, f"fake {job.submission}")

    monkeypatch.setattr(eng, "run_job", fake_run)
    monkeypatch.setattr(eng, "local_gpus", lambda: ["0", "1"])
    e = eng.LocalEngine(None, "cuda")
    assert e.workers == 2
    got: list[str] = []
    main = threading.get_ident()

    def on_result(job: Job, out: JobOutcome) -> None:
        assert threading.get_ident() == main
        got.append(job.submission)

    e.run(jobs(5), on_result)
    assert sorted(got) == [f"s{i}" for i in range(5)]
    assert set(seen_slots) <= {("0",), ("1",)}  # each job pinned to exactly one GPU


class FakeRay:
    """Just enough of the ray module: two results, then the cluster disappears."""

    def __init__(self) -> None:
        import ray

        self.exceptions = ray.exceptions
        self.calls = 0

    def wait(self, refs: list[Any], num_returns: int, timeout: float) -> tuple[list[Any], list[Any]]:
        self.calls += 1
        if self.calls > 2:
            raise self.exceptions.RaySystemError("GCS unreachable")
        return [refs[0]], refs[1:]

    def get(self, ref: Any) -> JobOutcome:
        return JobOutcome(None, "done")


def test_lost_ray_cluster_raises_a_clear_error_after_keeping_finished_results() -> None:
    pytest.importorskip("ray")
    e = object.__new__(eng.RayEngine)
    e.ray = FakeRay()
    e.device = "cpu"
    e.group = "ray-test"
    e.gcs = "auto"

    class Remote:
        def remote(self, job: Job, device: str, group: str) -> object:
            return object()

    e.remote = Remote()
    got: list[str] = []
    with pytest.raises(eng.ClusterLost, match=r"went away mid-run.*kept.*resume"):
        e.run(jobs(4), lambda j, o: got.append(j.submission))
    assert len(got) == 2


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed on return: nothing listens there


def test_refused_is_proof_only_of_a_port_nothing_listens_on() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        assert not refused(f"127.0.0.1:{srv.getsockname()[1]}")
    assert refused(f"127.0.0.1:{_closed_port()}")
    assert refused(f"ray://127.0.0.1:{_closed_port()}")
    assert not refused("auto") and not refused("no-port-here")


class StuckRay(FakeRay):
    """Nothing ever finishes, and a GCS call would block (Ray's client ends the process
    60 s after its GCS went away)."""

    def wait(self, refs: list[Any], num_returns: int, timeout: float) -> tuple[list[Any], list[Any]]:
        return [], refs

    def cluster_resources(self) -> dict[str, float]:
        raise AssertionError("a refused address is proof enough: no GCS call")


def test_a_head_that_refuses_connections_is_a_lost_cluster_without_asking_ray(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    monkeypatch.setattr(eng, "CLUSTER_CHECK_S", 0.0)
    monkeypatch.setattr(eng, "stop_tasks", lambda *a: None)
    e = object.__new__(eng.RayEngine)
    e.ray, e.device, e.group = StuckRay(), "cpu", "ray-test"
    e.gcs = f"127.0.0.1:{_closed_port()}"

    class Remote:
        def remote(self, job: Job, device: str, group: str) -> object:
            return object()

    e.remote = Remote()
    with pytest.raises(eng.ClusterLost, match=rf"went away mid-run.*nothing answers at {e.gcs}"):
        e.run(jobs(2), lambda j, o: None)


def test_cpu_workers_default_is_one_per_two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [eng.cpu_workers(c) for c in (1, 2, 3, 4, 16)] == [1, 1, 1, 2, 8]
    monkeypatch.setattr(eng.os, "cpu_count", lambda: 8)
    assert eng.LocalEngine(None, "cpu").workers == 4
    assert eng.LocalEngine(3, "cpu").workers == 3  # an explicit count is kept
    monkeypatch.setattr(eng.os, "cpu_count", lambda: None)
    assert eng.LocalEngine(None, "cpu").workers == 1
