"""On the CPU a call's time is its round trip less the empty calls': when most calls are no
longer than the empty ones the time is noise, and that is timing_unreliable, not 1e-6 ms."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sandbox.contract.failure import StageFailure
from sandbox.judge.benchmark import SideClock


def _clock(judge: list[float], noop: list[float], waits: list[float] | None = None,
           noop_waits: list[float] | None = None, trusted: bool = False,
           runner: list[float] | None = None) -> SideClock:
    ev = SimpleNamespace(dev="cpu", warnings=[], trusted=lambda path: trusted)
    c = SideClock(ev, SimpleNamespace(path="/kg/in/current.py"), "accept")  # type: ignore[arg-type]
    c.judge_ms, c.noop_judge = list(judge), list(noop)
    c.ms = list(runner) if runner is not None else list(judge)
    c.waits = list(waits) if waits is not None else [0.0] * len(judge)
    c.noop_waits = list(noop_waits) if noop_waits is not None else [0.0] * len(noop)
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
    # no waits for a CPU: the host is idle, the kernel shorter than the noise (not "loaded")
    assert "the host is not loaded" in err.message and "too loaded" not in err.message
    with pytest.raises(StageFailure):
        c.samples(base=1.0)  # the pooled base of a pair decides the same way
    busy = _clock([3.0, 2.9, 3.2, 2.8, 3.05], [3.0, 3.1, 3.0], waits=[2.0] * 5,
                  noop_waits=[2.0] * 3)
    with pytest.raises(StageFailure) as e:
        busy.samples()
    assert "too loaded to time this kernel" in e.value.error.message


def test_each_round_trip_less_its_wait_for_a_cpu_is_what_is_timed() -> None:
    """A loaded host: the round trips (real and empty) are mostly waits for a CPU. Less them,
    the kernel's 2 ms is there again; with them, most calls would be inside the noise."""
    judge, waits = [9.0, 3.1, 14.0, 6.0, 7.2], [6.0, 0.1, 11.0, 3.0, 4.0]
    noop, noop_waits = [8.0, 1.0, 15.0], [7.0, 0.0, 14.0]
    with pytest.raises(StageFailure):
        _clock(judge, noop).samples()  # without the waits: 3 of 5 no longer than 8 ms
    assert _clock(judge, noop, waits, noop_waits).samples() == pytest.approx(
        [2.0, 2.0, 2.0, 2.0, 2.2])
    # the pooled base of a pair is passed in already less its waits
    assert _clock(judge, noop, waits, noop_waits).samples(base=1.0)[0] == pytest.approx(2.0)


def test_the_trusted_reference_inside_the_noise_is_timed_by_its_runner_clock() -> None:
    """A reference of microseconds (a torch add of 1000 elements) is inside the round trip's
    noise: its own harness's clock times it, and the report says so. The same figures from
    untrusted code are still timing_unreliable: a candidate's time is never its word."""
    judge, noop, runner = [3.5, 3.4, 3.7, 3.3, 3.6], [3.6, 3.5, 3.7], [0.004, 0.005, 0.0, 0.004, 0.006]
    ref = _clock(judge, noop, trusted=True, runner=runner)
    assert ref.samples() == pytest.approx([0.004, 0.005, 1e-6, 0.004, 0.006])
    assert ref.samples(base=3.6) == pytest.approx([0.004, 0.005, 1e-6, 0.004, 0.006])
    (warning,) = set(ref.ev.warnings)
    assert "trusted reference" in warning and "runner's own clock" in warning
    with pytest.raises(StageFailure) as e:
        _clock(judge, noop, trusted=False, runner=runner).samples()
    assert e.value.error.code == "timing_unreliable"
    # a trusted reference the judge's clock does resolve keeps the judge's clock
    slow = _clock([5.5, 5.4, 5.7], noop, trusted=True, runner=[0.1, 0.1, 0.1])
    assert slow.samples() == pytest.approx([1.9, 1.8, 2.1])
