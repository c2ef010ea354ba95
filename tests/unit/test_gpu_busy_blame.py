"""Whose fault a busy device between paired calls is (sandbox/judge/acceptance.check_idle):
the last side's only for a time slice of another context with no foreign process."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sandbox.contract.failure import StageFailure
from sandbox.judge.acceptance import BLAME_MS, check_idle


def _probe(busy: float | None) -> SimpleNamespace:
    return SimpleNamespace(busy=lambda: busy, limit_ms=0.25, idle_ms=0.015)


def _fails(busy: float, foreign: str | None, last_is_cur: bool = False) -> StageFailure:
    cand, cur = object(), object()
    with pytest.raises(StageFailure) as e:
        check_idle(_probe(busy), cur if last_is_cur else cand, cur,  # type: ignore[arg-type]
                   lambda: foreign)
    return e.value


def test_an_idle_device_passes_and_nvml_is_not_asked() -> None:
    asked: list[int] = []

    def foreign() -> str | None:
        asked.append(1)
        return None
    check_idle(_probe(None), object(), object(), foreign)  # type: ignore[arg-type]
    assert not asked


def test_a_short_busy_probe_is_the_host_not_the_candidate() -> None:
    err = _fails(0.346, None).error  # an honest paired softmax beside other evaluations, H200
    assert (err.code, err.origin) == ("timing_unreliable", "infrastructure")


def test_foreign_processes_on_the_device_are_not_the_candidate() -> None:
    err = _fails(3.0, "5 compute processes on the device but the judge started 3").error
    assert (err.code, err.origin) == ("timing_unreliable", "infrastructure")
    assert "5 compute processes" in err.message


def test_a_time_slice_with_only_the_sandbox_on_the_device_is_the_last_side() -> None:
    err = _fails(BLAME_MS + 1.0, None).error
    assert (err.code, err.origin) == ("gpu_busy_between_calls", "candidate")
    err = _fails(BLAME_MS + 1.0, None, last_is_cur=True).error
    assert err.code == "current_gpu_busy_between_calls"
