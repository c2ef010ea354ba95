"""A benchmark stage whose declared calls would not fit in its run_s ends with the calls it
has (at least the escape check's minimum) and says so (sandbox.judge.benchmark.room_for_more):
a time on fewer samples, never a timeout of an honest kernel on a loaded host; a stage that
cannot hold even the minimum is still the stage clock's timeout."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from sandbox.contract.failure import StageFailure
from sandbox.judge import benchmark
from sandbox.judge.benchmark import ESCAPE_MIN_CALLS_CPU, benchmark_stage, room_for_more


class Clock:
    """The judge's clock: each timed call advances it by its time (seconds), times ``slow``
    after ``slow_after`` calls (the load rose mid-stage)."""

    def __init__(self, slow_after: int | None = None, slow: float = 1.0):
        self.now, self.calls, self.slow_after, self.slow = 0.0, 0, slow_after, slow

    def monotonic(self) -> float:
        return self.now


def _ev(budget_s: float, call_s: float, samples: int, reps: int = 1,
        clock: Clock | None = None, stop_noise: float | None = None,
        times: list[float] | None = None) -> Any:
    clk = clock or Clock()

    def timed(side: Any, slots: Any, check: bool, stage: str, inputs: Any = None,
              buf: int = 0) -> dict[str, Any]:
        if clk.now > budget_s:  # what the real stage clock does before a call
            raise StageFailure("benchmark", "timeout", "the benchmark stage ran out")
        clk.calls += 1
        late = clk.slow_after is not None and clk.calls > clk.slow_after
        clk.now += call_s * (clk.slow if late else 1.0)
        ms = times[clk.calls % len(times)] if times else 5.0
        return {"ms": ms, "judge_ms": ms + 1.0, "tail_ms": 0.0, "wait_ms": 0.0, "threads": 1,
                "host_ms": (0.0, 0.0)}

    bench = SimpleNamespace(warmup=1, warmup_ms=0.0, samples=samples, reps=reps, cache="cold",
                            cuda_graph=False, stop_noise=stop_noise)
    return SimpleNamespace(
        task=SimpleNamespace(benchmark=bench, correctness=SimpleNamespace(timed_check_fraction=1.0)),
        req=SimpleNamespace(floor_ms=None, limits=SimpleNamespace(run_s=budget_s)),
        bench_dims={"N": 8}, slots=lambda dims=None: [], rng=random.Random(0), timed=timed,
        dev="cpu", stage=None, start_run_clock=lambda: None, run_deadline=budget_s,
        noop=lambda side, stage: (1.0, 0.0, 0.0, (0.0, 0.0), 0.0),
        left=lambda deadline: max(0.0, deadline - clk.now), warnings=[], clock=clk)


def _run(ev: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(benchmark, "time", ev.clock)
    side: Any = SimpleNamespace(flush_bytes=0, lead_us=0.0)
    return benchmark_stage(ev, side)


def test_a_stage_that_fits_takes_every_declared_call(monkeypatch: pytest.MonkeyPatch) -> None:
    ev = _ev(budget_s=100.0, call_s=1.0, samples=20)
    rec = _run(ev, monkeypatch)
    assert rec.n == 20 and rec.requested_calls == 20 and ev.warnings == []
    assert rec.stopped_by == "count"


def test_out_of_budget_the_stage_ends_with_its_calls_and_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ev = _ev(budget_s=100.0, call_s=1.0, samples=25, reps=5)  # 125 calls of 1 s in 100 s
    rec = _run(ev, monkeypatch)
    assert ESCAPE_MIN_CALLS_CPU <= rec.n < 125 and rec.requested_calls == 125
    assert ev.clock.now <= 100.0  # never past the budget: no timeout
    assert rec.n >= 95  # it used the budget: 2 calls of room at 1.25x
    assert len(ev.warnings) == 1 and f"timed {rec.n} of the 125 calls" in ev.warnings[0]
    assert "wider interval" in ev.warnings[0] and rec.stopped_by == "budget"


def test_a_load_that_rises_mid_stage_still_ends_inside_the_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ev = _ev(budget_s=100.0, call_s=0.5, samples=150, clock=Clock(slow_after=60, slow=4.0))
    rec = _run(ev, monkeypatch)
    assert rec.n < 150 and ev.clock.now <= 100.0 and len(ev.warnings) == 1


def test_a_stage_that_cannot_hold_the_minimum_is_still_a_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ev = _ev(budget_s=5.0, call_s=1.0, samples=30)  # the escape check needs 10 calls
    with pytest.raises(StageFailure) as e:
        _run(ev, monkeypatch)
    assert e.value.error.code == "timeout"


def test_room_for_more_below_the_minimum_always_and_above_it_by_the_clock() -> None:
    ev = _ev(budget_s=10.0, call_s=1.0, samples=30)
    assert room_for_more(ev, 3, 10, [100.0, 100.0, 100.0])  # below the minimum: always
    assert room_for_more(ev, 10, 10, [1.0] * 10)  # 10 s left >= 2 x 1.25 x 1 s
    ev.clock.now = 8.0
    assert not room_for_more(ev, 10, 10, [1.0] * 10)  # 2 s left < 2.5 s
    # the pace follows the recent calls when they are slower than the mean
    ev.clock.now = 3.0  # 7 s left: room for calls at the mean's pace (0.8 s), not the recent 3 s
    assert room_for_more(ev, 20, 10, [0.1] * 15 + [0.1] * 5)
    assert not room_for_more(ev, 20, 10, [0.1] * 15 + [3.0] * 5)


def test_a_noise_rule_ends_a_quiet_stage_at_the_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    ev = _ev(budget_s=1000.0, call_s=1.0, samples=100, stop_noise=0.01,
             times=[5.0, 5.01, 4.99, 5.0])
    rec = _run(ev, monkeypatch)
    assert rec.n == ESCAPE_MIN_CALLS_CPU and rec.stopped_by == "noise"
    assert rec.requested_calls == 100 and ev.warnings == []


def test_a_noise_rule_takes_every_call_while_the_interval_stays_wide(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ev = _ev(budget_s=1000.0, call_s=1.0, samples=60, stop_noise=0.01, times=[1.0, 9.0])
    rec = _run(ev, monkeypatch)
    assert rec.n == 60 and rec.stopped_by == "count"
