"""A timing bound that would blame a side on a GPU is measured again first
(sandbox/judge/contention.py): another job on the device, or noise that explains the
overrun, makes it ``timing_unreliable`` (infrastructure), never the cheat's code; with
neither the cheat's code stands. NVML, the probe and the device are faked (no GPU here);
the copy's round trip and the runner's CPU accounting are this process's, real. The H200
run beside a process that fills and keeps the GPU busy: bench/gpu_shared.sh."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from sandbox.contract.device_memory import Figures
from sandbox.contract.failure import StageFailure
from sandbox.judge import benchmark, contention, outputs

GiB = 1 << 30


class FakeProbe:
    def __init__(self, samples: list[tuple[float, float]]) -> None:
        self._samples, self.idle_ms = samples, 0.02

    def samples(self, n: int) -> list[tuple[float, float]]:
        assert n == contention.PROBES
        return list(self._samples)


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The device as contention() reads it: NVML's extra processes, memory, the probe."""
    state: dict[str, Any] = {"extra": None, "fig": Figures(free=100 * GiB, total=140 * GiB,
                                                          holders={"pid 1": 20 * GiB, "pid 2": 19 * GiB}),
                             "probe": [(0.03, 0.0)] * contention.PROBES}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(contention.nvml, "foreign_compute_processes",
                        lambda nv, expected: state["extra"])
    monkeypatch.setattr(contention, "memory_figures", lambda dev, nv=None: state["fig"])
    monkeypatch.setattr(contention.gpu_idle, "probe", lambda: FakeProbe(state["probe"]))
    return state


def _hub(**kw: Any) -> Any:
    return SimpleNamespace(**{"dev": "cuda", "nvml_handle": object(), "sides": [object()],
                              "problem": SimpleNamespace(harness_processes=dict), **kw})


def test_a_quiet_device_held_by_the_sandbox_alone_shows_no_contention(device: dict[str, Any]) -> None:
    assert contention.contention(_hub()) is None
    assert contention.held_outside(_hub()) is None
    assert contention.contention(_hub(dev="cpu")) is None  # the CPU has its own load logic


def test_each_kind_of_evidence_is_enough(device: dict[str, Any]) -> None:
    device["extra"] = "4 compute processes on the device but the judge started 3"
    assert "4 compute processes" in contention.contention(_hub())["contention"]  # type: ignore[index]
    device["extra"] = None
    # 90% of the device held by processes the sandbox cannot see: another job
    device["fig"] = Figures(free=2 * GiB, total=140 * GiB, holders={"pid 1": 10 * GiB})
    found = contention.contention(_hub())
    assert found is not None and found["outside_bytes"] == 128 * GiB
    assert "128.00 GiB of device memory held by processes this sandbox cannot see" in found["contention"]
    assert contention.held_outside(_hub()) is not None
    device["fig"] = Figures(free=100 * GiB, total=140 * GiB, holders={"pid 1": 40 * GiB})
    device["probe"] = [(0.03, 0.0), (2.1, 0.05), (0.04, 0.0), (0.03, 0.0), (0.03, 0.0)]
    found = contention.contention(_hub())
    assert found is not None and "probe of the device took 2.050 ms" in found["contention"]
    assert found["probe_ms"][1] == 2.1


def test_a_slow_probe_that_only_waited_for_a_cpu_is_not_the_device(device: dict[str, Any]) -> None:
    device["probe"] = [(3.0, 2.95)] * contention.PROBES  # the host's load, not a time slice
    assert contention.contention(_hub()) is None


def test_memory_is_no_evidence_where_nvml_gives_no_usage() -> None:
    assert contention.outside_bytes(GiB, 140 * GiB, {"pid 1": 0}) is None  # usage not available
    assert contention.outside_bytes(GiB, 140 * GiB, {}) is None  # no process visible at all
    assert contention.outside_bytes(None, 140 * GiB, {"pid 1": GiB}) is None
    assert contention.outside_bytes(100 * GiB, 140 * GiB, {"pid 1": 39 * GiB}) == GiB


# ---- the returned outputs' copy on CUDA (sandbox.judge.outputs.collect_outputs) ------------


def _copy_fixture(monkeypatch: pytest.MonkeyPatch, copy_s: float, noop_ms: list[float],
                  found: dict[str, Any] | None) -> tuple[Any, Any, list[Any]]:
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(outputs, "contention", lambda ev: found)
    out = torch.zeros(256, dtype=torch.int64)
    slot: Any = SimpleNamespace(role="output", name="out", wire=lambda: {"name": "out"})
    side = SimpleNamespace(runner=SimpleNamespace(proc=SimpleNamespace(pid=os.getpid()),
                                                  request=lambda msg, timeout: time.sleep(copy_s)),
                           views=lambda outs, buf: {"out": out},
                           prefix=(), base_caught=-1)  # not under the idle watch (test_idle's)
    rts = iter(noop_ms)
    ev = SimpleNamespace(dev="cuda", left=lambda deadline: 10.0,
                         noop=lambda side, stage: (next(rts), 0.5, 0.0, (0.0, 0.0), 0.0))
    return ev, side, [slot]


def _collect(ev: Any, side: Any, slots: list[Any]) -> StageFailure:
    with pytest.raises(StageFailure) as e:
        outputs.collect_outputs(ev, side, slots, 0, "benchmark", 0.0, call_ms=0.1)
    return e.value


def test_a_slow_copy_on_a_shared_device_is_unreliable_with_the_figures(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 30 ms against a ~5 ms bound, quick empty round trips: work_deferred_to_copy before
    found = {"contention": "60.00 GiB of device memory held by processes this sandbox cannot see",
             "outside_bytes": 60 * GiB}
    ev, side, slots = _copy_fixture(monkeypatch, 0.03, [0.3] * outputs.REMEASURE, found)
    err = _collect(ev, side, slots).error
    assert (err.code, err.origin) == ("timing_unreliable", "infrastructure")
    assert "not this sandbox's alone" in err.message and "60.00 GiB" in err.message
    d = err.detail
    assert d["collect_ms"] > d["bound_ms"] and d["outside_bytes"] == 60 * GiB
    assert len(d["remeasured_round_trips_ms"]) == outputs.REMEASURE
    assert len(d["remeasured_copies_ms"]) == outputs.REMEASURE


def test_a_slow_copy_explained_by_the_noise_measured_again_is_unreliable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the first empty round trip was quick, the next ones as slow as the copy: the machine
    ev, side, slots = _copy_fixture(monkeypatch, 0.03, [0.3, 9.0, 8.0, 0.4, 0.3], None)
    err = _collect(ev, side, slots).error
    assert (err.code, err.origin) == ("timing_unreliable", "infrastructure")
    assert "measured again" in err.message and err.detail["remeasured_bound_ms"] >= 36.0


def test_a_slow_copy_on_a_quiet_device_is_still_work_deferred_to_copy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ev, side, slots = _copy_fixture(monkeypatch, 0.03, [0.3] * outputs.REMEASURE, None)
    err = _collect(ev, side, slots).error
    assert (err.code, err.origin) == ("work_deferred_to_copy", "candidate")
    assert err.detail["remeasured_bound_ms"] < err.detail["collect_ms"]


# ---- the timed region's escape check on CUDA (sandbox.judge.benchmark.SideClock) ----------


@pytest.mark.parametrize(("found", "code"), [
    (None, "work_escaped_timing"),
    ({"contention": "the judge's probe of the device took 2.000 ms", "probe_ms": [2.0]},
     "timing_unreliable"),
])
def test_escaped_work_on_a_shared_device_is_not_laid_on_the_candidate(
        monkeypatch: pytest.MonkeyPatch, found: dict[str, Any] | None, code: str) -> None:
    monkeypatch.setattr(benchmark, "contention", lambda ev: found)
    clock: Any = benchmark.SideClock.__new__(benchmark.SideClock)
    clock.ev, clock.stage = SimpleNamespace(dev="cuda"), "benchmark"
    clock.escape = lambda: {"escaped": True, "hidden_ms": 3.1, "budget_ms": 0.4, "flagged": 3}
    with pytest.raises(StageFailure) as e:
        clock.raise_if_escaped()
    assert e.value.error.code == code
    if found is not None:
        assert e.value.error.origin == "infrastructure"
        assert e.value.error.detail["hidden_ms"] == 3.1 and e.value.error.detail["probe_ms"] == [2.0]


@pytest.mark.parametrize("code", ["work_deferred_to_copy", "compile_timeout",
                                  "current_work_deferred_to_copy"])
def test_the_host_voids_these_timing_verdicts_too_when_another_job_shared_the_gpu(code: str) -> None:
    from grader.backends.base import SandboxOutcome
    from grader.grading.shared_device import account_for_shared_device
    from grader.report.model import Report, ReportError

    r = Report(ok=False, stage="benchmark", errors=[ReportError(
        stage="benchmark", code=code, origin="candidate", message="copy 15.3 ms, bound 6.8 ms")])
    account_for_shared_device(r, SandboxOutcome(
        backend="bwrap", exit_code=0, signal=None, wall_s=1.0,
        device_shared_by=("pid 4242 (python3, 120.00 GiB)",), device_watched=True))
    (e,) = r.errors
    assert (e.code, e.origin, e.detail["replaced"]) == ("foreign_gpu_process", "infrastructure", code)
