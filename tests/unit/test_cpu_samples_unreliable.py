"""On the CPU a call's time is its round trip less the empty calls': when most calls are no
longer than the empty ones the time is noise, and that is timing_unreliable, not 1e-6 ms."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sandbox.contract.failure import StageFailure
from sandbox.judge.benchmark import SideClock


def _clock(judge: list[float], noop: list[float]) -> SideClock:
    c = SideClock(SimpleNamespace(dev="cpu"), SimpleNamespace(), "accept")  # type: ignore[arg-type]
    c.judge_ms, c.ms, c.noop_judge = list(judge), list(judge), list(noop)
    return c


def test_times_above_the_empty_calls_are_the_difference() -> None:
    c = _clock([3.0, 3.2, 2.9, 3.1], [1.0, 1.1, 0.9])
    assert c.samples() == pytest.approx([2.0, 2.2, 1.9, 2.1])


def test_a_few_calls_inside_the_noise_are_clamped() -> None:
    c = _clock([3.0, 0.5, 2.9, 3.1], [1.0, 1.0, 1.0])
    assert c.samples()[1] == 1e-6


def test_most_calls_inside_the_noise_is_timing_unreliable_of_the_infrastructure() -> None:
    c = _clock([1.0, 0.9, 1.2, 0.8, 1.05], [1.0, 1.1, 1.0])
    with pytest.raises(StageFailure) as e:
        c.samples()
    err = e.value.error
    assert (err.code, err.origin, err.stage) == ("timing_unreliable", "infrastructure", "accept")
    assert err.detail["not_longer"] == 3
    with pytest.raises(StageFailure):
        c.samples(base=1.0)  # the pooled base of a pair decides the same way
