"""Who is blamed for a compute process on the GPU beyond the sandbox's own (pure logic:
NVML's count and the uid scan are faked; the real ones run in tests/e2e/test_gpu.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sandbox.contract.failure import StageFailure
from sandbox.judge import isolation, prestart
from sandbox.launcher import identity
from sandbox.tools import nvml


def _hub() -> Any:
    runner = SimpleNamespace(proc=SimpleNamespace(pid=11), uid=65501)
    return SimpleNamespace(dev="cuda", nvml_handle=object(), nvml=lambda: (None, ""),
                           sides=[SimpleNamespace(runner=runner)],
                           problem=SimpleNamespace(harness_processes=lambda: {}),
                           req=SimpleNamespace(current=None))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    state: dict[str, Any] = {"nvml": [], "scans": []}

    def foreign(_nv: object, expected: int) -> str | None:
        assert expected == 2  # the judge and its one runner
        got: str | None = state["nvml"].pop(0) if len(state["nvml"]) > 1 else state["nvml"][0]
        return got

    def scan(_expected: object, harness_uids: frozenset[int] = frozenset()) -> list[Any]:
        return state["scans"].pop(0) if state["scans"] else []

    monkeypatch.setattr(nvml, "foreign_compute_processes", foreign)
    monkeypatch.setattr(identity, "extra_runner_processes", scan)
    monkeypatch.setattr(prestart, "pending", dict)
    monkeypatch.setattr(isolation, "FOREIGN_SETTLE_S", 0.1)
    return state


def test_an_extra_gpu_process_when_the_sandbox_has_none_is_another_jobs(fake: dict[str, Any]) -> None:
    fake["nvml"] = ["3 compute processes on the device but the judge started 2"]
    with pytest.raises(StageFailure) as e:
        isolation.check_beside(_hub(), "benchmark")
    assert (e.value.error.code, e.value.error.origin) == ("foreign_gpu_process", "infrastructure")
    assert "another job" in e.value.error.message


def test_a_count_that_comes_down_within_the_settling_time_is_no_fault(fake: dict[str, Any]) -> None:
    fake["nvml"] = ["3 compute processes", None]  # a closed runner's context leaving the driver
    isolation.check_beside(_hub(), "benchmark")


def test_a_process_of_the_sandbox_found_on_the_second_look_is_the_candidates(
        fake: dict[str, Any]) -> None:
    child = identity.ExtraProcess(pid=12, uid=65501, name="python3", owner="candidate.py")
    fake["nvml"] = ["3 compute processes"]
    fake["scans"] = [[], [child]]  # started after the first scan
    with pytest.raises(StageFailure) as e:
        isolation.check_beside(_hub(), "accept")
    assert (e.value.error.code, e.value.error.origin) == ("runner_spawned_process", "candidate")


def test_a_process_of_the_sandbox_is_the_candidates_before_nvml_is_asked(fake: dict[str, Any]) -> None:
    child = identity.ExtraProcess(pid=12, uid=65501, name="python3", owner="candidate.py")
    fake["nvml"] = ["3 compute processes"]
    fake["scans"] = [[child]]
    with pytest.raises(StageFailure) as e:
        isolation.check_beside(_hub(), "benchmark")
    assert (e.value.error.code, e.value.error.origin) == ("runner_spawned_process", "candidate")
