"""The escape check: work the timed region did not see, judged from two other clocks."""

from __future__ import annotations

import random

from sandbox.judge.escape import claim_problem, escaped_time


def _noisy(base: float, n: int, rng: random.Random, jitter: float) -> list[float]:
    return [base + rng.uniform(0, jitter) for _ in range(n)]


def test_honest_cpu_calls_under_load_are_not_flagged() -> None:
    rng = random.Random(1)
    ms = _noisy(40.0, 50, rng, 10.0)
    overhead = _noisy(2.0, 50, rng, 3.0)  # a loaded host: the overhead itself is noisy
    judge = [m + o for m, o in zip(ms, _noisy(2.0, 50, rng, 3.0), strict=True)]
    out = escaped_time(ms, judge, overhead, "cpu")
    assert not out["escaped"], out


def test_honest_short_cpu_calls_descheduled_before_the_reply_are_not_flagged() -> None:
    """Seen under load: 2.79 ms of a <4 ms call outside the runner's clock; the judge's
    clock decides the time on the CPU, so only a gross lie is flagged."""
    ms = [1.0] * 50
    judge = [1.0 + 0.3 + 2.79] * 50  # the empty call's 0.3 ms, then 2.79 ms descheduled
    out = escaped_time(ms, judge, [0.3] * 50, "cpu")
    assert not out["escaped"] and out["hidden_ms"] > 2.7, out


def test_a_clock_slowed_a_hundredfold_is_flagged() -> None:
    rng = random.Random(2)
    true = _noisy(40.0, 50, rng, 5.0)
    claimed = [t / 100 for t in true]
    judge = [t + 2.0 for t in true]
    out = escaped_time(claimed, judge, [2.0] * 50, "cpu")
    assert out["escaped"] and out["hidden_ms"] > 30, out


def test_gpu_launch_cost_hidden_behind_the_flush_is_not_flagged() -> None:
    # vector_add on an H200: 17 us of kernel, ~40 us of host launch the judge sees too.
    ms = [0.017] * 100
    judge = [0.30 + 0.040 + 0.017] * 100
    out = escaped_time(ms, judge, [0.30] * 100, "cuda", tails=[0.006] * 100,
                       noop_tails=[0.006] * 100)
    assert not out["escaped"], out


def test_gpu_work_left_running_past_the_end_event_is_flagged_by_the_idle_tail() -> None:
    ms = [0.004] * 100  # the events saw only the launch
    judge = [0.30 + 0.032] * 100
    out = escaped_time(ms, judge, [0.30] * 100, "cuda", tails=[0.006 + 0.030] * 100,
                       noop_tails=[0.006] * 100)
    assert out["escaped"] and out["tail_hidden_ms"] > 0.029, out


def test_honest_tail_jitter_seen_on_an_h200_is_not_flagged() -> None:
    # Honest kernels of 4-17 us showed tails -5.4..+8.3 us around the empty call's.
    for extra in (-0.0054, 0.0083):
        out = escaped_time([0.0046] * 100, [0.30] * 100, [0.30] * 100, "cuda",
                           tails=[0.006 + extra] * 100, noop_tails=[0.006] * 100)
        assert not out["escaped"], out


def _round_trips(rng: random.Random, n: int, scale: float) -> list[float]:
    """A GPU round trip as seen on an H200: ~0.55 ms and a long right tail."""
    return [0.55 + rng.expovariate(1 / scale) for _ in range(n)]


def test_honest_gpu_calls_with_a_noisy_round_trip_are_not_flagged() -> None:
    """Round trips of 0.5-0.9 ms: the medians of 10 real and 10 empty calls moved apart by
    up to 0.12 ms on an H200 (honest 4-8 us kernels). With the 40 calls the check now rests
    on (benchmark.ESCAPE_MIN_CALLS) and a budget that follows the measured noise, honest
    calls pass."""
    flagged = unreliable = 0
    for seed in range(400):
        rng = random.Random(seed)
        ms = [0.005] * 40
        judge = [m + o for m, o in zip(ms, _round_trips(rng, 40, 0.12), strict=True)]
        out = escaped_time(ms, judge, _round_trips(rng, 40, 0.12), "cuda",
                           tails=[0.006] * 40, noop_tails=[0.006] * 40)
        assert out["noise_ms"] > 0, out
        flagged += out["escaped"]
        unreliable += out["unreliable"]
    assert flagged <= 2 and unreliable <= 2, (flagged, unreliable)


def test_a_runner_shaving_its_events_beyond_the_noise_is_flagged() -> None:
    rng = random.Random(3)
    true = [0.700] * 25
    claimed = [t - 0.35 for t in true]  # half the kernel's time hidden
    judge = [t + o for t, o in zip(true, _round_trips(rng, 25, 0.05), strict=True)]
    out = escaped_time(claimed, judge, _round_trips(rng, 25, 0.05), "cuda",
                       tails=[0.006] * 25, noop_tails=[0.006] * 25)
    assert out["escaped"] and out["hidden_ms"] > out["budget_ms"], out


def _delayed(hidden: float, seed: int) -> tuple[list[float], list[float], list[float]]:
    """Replies, real and empty, delayed by ~1 ms on average (a loaded host, or a runner
    making its own replies noisy); ``hidden`` ms per real call outside the events."""
    rng = random.Random(seed)
    ms = [0.005] * 40
    judge = [m + 0.55 + hidden + rng.expovariate(1.0) for m in ms]
    noop = [0.55 + rng.expovariate(1.0) for _ in ms]
    return ms, judge, noop


def test_a_round_trip_too_noisy_to_bound_the_events_passes_only_within_the_cap() -> None:
    """Too noisy to bound the events by the floor: the budget is the cap (0.4 ms). A median
    within it passes, as honest noisy runs on an H200 did (standard errors 0.17-0.36 ms,
    medians -3.4..-0.04 ms); one over it is timing_unreliable, never a pass and never a
    verdict against the candidate."""
    for hidden, least_passed in ((0.0, 70), (1.0, 0)):
        passed = 0
        for seed in range(100):
            ms, judge, noop = _delayed(hidden, seed)
            out = escaped_time(ms, judge, noop, "cuda", tails=[0.006] * 40, noop_tails=[0.006] * 40)
            assert 4 * out["noise_ms"] > 0.4 and out["budget_ms"] == 0.4, out
            assert not out["escaped"], out
            assert out["unreliable"] == (out["hidden_ms"] > 0.4), out
            passed += not out["unreliable"]
        assert passed >= least_passed, (hidden, passed)
        if hidden > 0.4:
            assert passed <= 5, passed  # what passes is what the noise put within the cap


def test_a_runner_clock_that_saw_less_than_its_events_is_tampering_on_cuda() -> None:
    """The timer-patch attack on a GPU: the events are true, the runner's clock runs 100x
    slow; the host interval contains the device interval, so that cannot be honest."""
    why = claim_problem(0.0187, 0.0187 / 100 + 0.001, judge_ms=0.7, device="cuda")
    assert why is not None and "tampered" in why


def test_honest_claims_pass_on_both_devices() -> None:
    # CUDA: the host clock spans the launch lead, the launch and the sync: more than the events
    assert claim_problem(0.0187, 0.13, judge_ms=0.7, device="cuda") is None
    # within the events' resolution of the host clock (a long kernel, ~0 host overhead)
    assert claim_problem(1.0, 0.999, judge_ms=1.4, device="cuda") is None
    assert claim_problem(0.0, 0.0, judge_ms=0.4, device="cuda") is None  # an empty call
    # the CPU: the runner's event time is its wall time
    assert claim_problem(3.0, 3.0, judge_ms=3.5, device="cpu") is None


def test_impossible_claims_are_refused_on_every_device() -> None:
    for device in ("cpu", "cuda"):
        assert claim_problem(None, 1.0, 1.0, device) is not None
        assert claim_problem(1.0, None, 1.0, device) is not None
        assert claim_problem(-0.1, 1.0, 1.0, device) is not None
        assert claim_problem(float("nan"), 1.0, 1.0, device) is not None
        assert "round trip" in (claim_problem(2.0, 2.0, judge_ms=1.0, device=device) or "")


def test_a_tiny_cpu_call_over_the_budget_within_the_noise_is_unreliable_not_escaped() -> None:
    """A 2-core host at load 37: an honest call the runner timed at 0.3 ms, 20 calls whose
    round trips and empty calls' overheads spread over 5-40 ms; the medians differ by more
    than the 2 ms budget by chance. Not evidence against the candidate, and no pass."""
    rng = random.Random(5)
    ms = [0.3] * 20
    judge = [0.3 + 14.0 + rng.expovariate(1 / 8.0) for _ in range(20)]
    overhead = [5.0 + rng.expovariate(1 / 8.0) for _ in range(20)]
    out = escaped_time(ms, judge, overhead, "cpu")
    assert out["hidden_ms"] > out["budget_ms"], out  # over the budget ...
    assert not out["escaped"] and out["unreliable"], out  # ... but within its noise


def test_a_slowed_clock_is_still_flagged_beside_a_noisy_round_trip() -> None:
    """The timer-patch attack (claims 1% of a 40 ms call) on a host with a few ms of jitter:
    far more over the budget than the noise explains."""
    rng = random.Random(6)
    true = _noisy(40.0, 20, rng, 5.0)
    judge = [t + 2.0 + rng.uniform(0, 3.0) for t in true]
    overhead = _noisy(2.0, 20, rng, 3.0)
    out = escaped_time([t / 100 for t in true], judge, overhead, "cpu")
    assert out["escaped"] and not out["unreliable"], out



def test_an_unreliable_cpu_escape_check_says_what_it_saw() -> None:
    """timing_unreliable on the CPU names the hidden time and its budget (the GPU's usable
    noise cap does not apply there), and it is the infrastructure's, retried."""
    from types import SimpleNamespace
    from typing import Any

    import pytest

    from sandbox.contract.failure import StageFailure
    from sandbox.judge.benchmark import SideClock

    rng = random.Random(5)
    ev: Any = SimpleNamespace(dev="cpu")
    clock = SideClock(ev, SimpleNamespace(), "benchmark")  # type: ignore[arg-type]
    clock.ms = [0.3] * 20
    clock.judge_ms = [0.3 + 14.0 + rng.expovariate(1 / 8.0) for _ in range(20)]
    clock.noop_overhead = [5.0 + rng.expovariate(1 / 8.0) for _ in range(20)]
    clock.waits, clock.noop_waits = [0.0] * 20, [0.0] * 20  # waits the kernel did not count
    with pytest.raises(StageFailure) as info:
        clock.raise_if_escaped()
    err = info.value.error
    assert (err.code, err.origin) == ("timing_unreliable", "infrastructure")
    assert "against a budget of" in err.message and "0.1000 ms is usable" not in err.message


def _loaded_host_1ms_calls(rng: random.Random, n: int = 40) -> tuple[list[float], list[float],
                                                                        list[float]]:
    """Honest 1 ms calls on an H200 host whose CPUs ran two dozen torch imports (A/A,
    2026-12-02): each real call, which waits on the device, came back ~3.3 ms later than the
    empty call beside it, with a spread of a few ms; the events themselves were true."""
    ms = [1.06 + rng.uniform(-0.002, 0.002) for _ in range(n)]
    judge = [m + 0.67 + 3.3 + rng.gauss(0, 1.5) for m in ms]
    noop = [0.67 + rng.expovariate(1 / 0.3) for _ in range(n)]
    return ms, judge, noop


def test_a_loaded_gpu_host_far_over_the_budget_with_a_noisy_round_trip_is_no_evidence() -> None:
    """Seen twice as `work_escaped_timing` blamed on honest candidates: hidden 3.08-3.34 ms
    against 0.4 ms, standard error 0.27-0.67 ms. A round trip that noisy bounds nothing,
    however far its median lies: timing_unreliable, and never a pass."""
    for seed in range(20):
        ms, judge, noop = _loaded_host_1ms_calls(random.Random(seed))
        out = escaped_time(ms, judge, noop, "cuda", tails=[0.006] * 40, noop_tails=[0.006] * 40)
        assert out["hidden_ms"] > 2.0 and 4 * out["noise_ms"] > 0.4, out
        assert out["unreliable"] and not out["escaped"], out


def test_a_gpu_round_trip_just_over_the_budget_within_its_noise_is_unreliable() -> None:
    ms = [0.05] * 40
    judge = [0.05 + 0.55 + 0.23 + (0.04 if i % 2 else -0.04) for i in range(40)]
    out = escaped_time(ms, judge, [0.55] * 40, "cuda", tails=[0.006] * 40, noop_tails=[0.006] * 40)
    assert out["budget_ms"] < out["hidden_ms"] <= out["budget_ms"] + 4 * out["noise_ms"], out
    assert out["unreliable"] and not out["escaped"], out


def test_work_past_the_end_event_is_flagged_by_the_tail_beside_a_noisy_round_trip() -> None:
    """The device's idle tail is not the host's clock: a side stream still running 0.5 ms
    past the end event is caught even where the round trip was too noisy to judge."""
    ms, judge, noop = _loaded_host_1ms_calls(random.Random(1))
    rng = random.Random(2)
    tails = [0.006 + 0.5 + rng.uniform(0, 0.004) for _ in ms]
    out = escaped_time(ms, judge, noop, "cuda", tails=tails, noop_tails=[0.006] * len(ms))
    assert out["escaped"] and out["hidden_ms"] > 0.49, out


def test_a_tail_over_its_budget_by_less_than_its_noise_is_unreliable_not_escaped() -> None:
    rng = random.Random(3)
    tails = [0.006 + 0.03 + rng.uniform(-0.06, 0.06) for _ in range(40)]  # a jittery host
    out = escaped_time([0.004] * 40, [0.55] * 40, [0.55] * 40, "cuda", tails=tails,
                       noop_tails=[0.006] * 40)
    assert out["tail_budget_ms"] < out["tail_hidden_ms"] <= (
        out["tail_budget_ms"] + 4 * out["tail_noise_ms"]), out
    assert out["unreliable"] and not out["escaped"], out


def test_an_unreliable_gpu_escape_check_names_both_clocks_and_blames_no_one() -> None:
    from types import SimpleNamespace
    from typing import Any

    import pytest

    from sandbox.contract.failure import StageFailure
    from sandbox.judge.benchmark import SideClock

    ms, judge, noop = _loaded_host_1ms_calls(random.Random(4))
    ev: Any = SimpleNamespace(dev="cuda")
    clock = SideClock(ev, SimpleNamespace(), "accept")  # type: ignore[arg-type]
    clock.ms, clock.judge_ms, clock.noop_overhead = ms, judge, noop
    clock.tails, clock.noop_tails = [0.006] * 40, [0.006] * 40
    with pytest.raises(StageFailure) as info:
        clock.raise_if_escaped("candidate: ")
    err = info.value.error
    assert (err.code, err.origin) == ("timing_unreliable", "infrastructure")
    assert "0.1000 ms is usable" in err.message and "standard error" in err.message
