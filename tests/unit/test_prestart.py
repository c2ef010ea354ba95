"""Which runners the judge starts ahead, and when it starts the next one (scheduling only:
the runner processes are stand-ins here; real runners are started by every e2e test)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

import pytest

from grader.task import load_task
from sandbox.contract import wire
from sandbox.judge import prestart

ROOT = Path(__file__).resolve().parents[2]
CAND, CUR = "/kg/in/candidate.py", "/kg/in/current.py"


class _Handle:
    started: ClassVar[list[str]] = []

    def __init__(self, path: str, entry: str, device: str, deferred: bool = False) -> None:
        self.path, self.device = path, device
        _Handle.started.append(path)
        self.proc: Any = type("P", (), {"pid": len(_Handle.started)})()
        self.uid = 1000 + len(_Handle.started)
        self.closed = False
        self.installed = not deferred

    def install(self) -> None:
        self.installed = True

    def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def _fake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prestart, "RunnerHandle", _Handle)
    _Handle.started = []
    prestart.close_all()


def _request(device: str, current: str | None, **kw: Any) -> wire.JudgeRequest:
    spec, ref = load_task(ROOT / "examples" / "vector_add")
    return wire.JudgeRequest(wire_version=wire.WIRE_VERSION, key="00" * 32, mode="evaluate",
                             device=device, limits=wire.LimitsWire(10.0, 20.0, None), phase_seed=7,
                             task=spec.to_wire(), reference=ref, candidate=CAND, current=current,
                             **kw)


def test_on_cuda_with_cpus_to_spare_paired_timing_and_its_replicate_find_runners_ready(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prestart, "usable_cpus", lambda: 16.0)
    prestart.start(_request("cuda", CUR))
    # all at the start (no import beside a measurement): 3 candidate runners, 2 current
    assert sorted(_Handle.started) == sorted([CAND] * 3 + [CUR] * 2)
    assert len(prestart.pending()) == 5
    for _ in range(3):
        assert prestart.take(CAND) is not None
    assert prestart.take(CUR) is not None and prestart.take(CUR) is not None
    assert prestart.take(CAND) is None and prestart.take(CUR) is None
    assert len(_Handle.started) == 5  # nothing started after the judge's start
    prestart.close_all()
    assert prestart.pending() == {}


@pytest.mark.parametrize("device,current,cpus,memory", [
    ("cpu", CUR, 16.0, None), ("cuda", None, 16.0, None), ("cuda", CUR, 2.0, None),
    ("cuda", CUR, 16.0, 2048)])
def test_otherwise_one_runner_per_module(monkeypatch: pytest.MonkeyPatch, device: str,
                                         current: str | None, cpus: float,
                                         memory: int | None) -> None:
    monkeypatch.setattr(prestart, "usable_cpus", lambda: cpus)
    req = _request(device, current)
    prestart.start(dataclasses.replace(req, limits=dataclasses.replace(req.limits,
                                                                       memory_mib=memory)))
    assert sorted(_Handle.started) == sorted([CAND, *([current] if current else [])])
    assert prestart.take(CAND) is not None and prestart.take(CAND) is None
    assert len(_Handle.started) == (2 if current else 1)


def test_a_warm_request_starts_runners_without_modules_and_installs_each_at_take() -> None:
    prestart.start(_request("cpu", CUR, warm=True, gated=True))
    assert sorted(_Handle.started) == sorted([CAND, CUR])
    ready: list[Any] = [h for hs in prestart._ready.values() for h in hs]
    assert ready and not any(h.installed for h in ready)  # nothing is staged yet
    handle: Any = prestart.take(CAND)
    assert handle is not None and handle.installed


def test_sanitized_or_other_modes_start_nothing() -> None:
    req = _request("cuda", CUR)
    prestart.start(dataclasses.replace(req, mode="profile"))
    prestart.start(dataclasses.replace(req, sanitize=wire.SanitizeWire(tool="memcheck")))
    assert _Handle.started == []


def test_usable_cpus_is_positive_and_at_most_the_affinity() -> None:
    import os

    assert 0 < prestart.usable_cpus() <= len(os.sched_getaffinity(0))


def _calibrate(device: str, memory: int | None, *scenarios: dict[str, Any]) -> wire.JudgeRequest:
    req = _request(device, None)
    return dataclasses.replace(req, mode="calibrate", current=None,
                               limits=dataclasses.replace(req.limits, memory_mib=memory),
                               calibrate=wire.CalibrateWire(scenarios=scenarios, decisions=1,
                                                            pairs=30))


def _scenario(name: str, decisions: int, fresh: bool = True) -> dict[str, Any]:
    return {"name": name, "candidate": f"/kg/in/{name}_b.py", "current": f"/kg/in/{name}_a.py",
            "decisions": decisions, "fresh_runners": fresh}


def test_a_calibrate_sandbox_of_fresh_pairs_starts_a_pair_for_every_decision_at_the_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prestart, "usable_cpus", lambda: 16.0)
    prestart.start(_calibrate("cuda", 65536, _scenario("aa", 6)))
    assert sorted(_Handle.started) == sorted(["/kg/in/aa_a.py", "/kg/in/aa_b.py"] * 6)
    for left in range(5, -1, -1):
        assert prestart.take("/kg/in/aa_a.py") is not None
        assert prestart.take("/kg/in/aa_b.py") is not None
        assert prestart.ready_count("/kg/in/aa_a.py") == left
    assert len(_Handle.started) == 12  # nothing started after the judge's start


def test_calibrate_pairs_ahead_are_bounded_by_runner_uids_memory_and_cpus(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prestart, "usable_cpus", lambda: 16.0)
    # 32 runner uids, one of them the problem process's: 15 pairs, shared in order
    assert prestart.calibrate_pairs(_calibrate("cuda", None, _scenario("a", 12),
                                               _scenario("b", 12))) == [12, 3]
    # memory: the judge's share, then 2 x RUNNER_MIB_AHEAD a pair; never less than one pair
    mib = prestart.JUDGE_MIB_AHEAD + 3 * 2 * prestart.RUNNER_MIB_AHEAD
    assert prestart.calibrate_pairs(_calibrate("cuda", mib, _scenario("a", 8))) == [3]
    assert prestart.calibrate_pairs(_calibrate("cuda", 1024, _scenario("a", 8))) == [1]
    # shared runners, the CPU, or too few CPUs: one pair, as before
    assert prestart.calibrate_pairs(_calibrate("cuda", None, _scenario("a", 8, fresh=False))) == [1]
    assert prestart.calibrate_pairs(_calibrate("cpu", None, _scenario("a", 8))) == [1]
    monkeypatch.setattr(prestart, "usable_cpus", lambda: 2.0)
    assert prestart.calibrate_pairs(_calibrate("cuda", None, _scenario("a", 8))) == [1]
