"""The CPU's time less the round trip's wait for a CPU (sandbox.judge.cpu_wait), end to end
on bwrap: every timed and empty call records its wait, the deciding times are the round
trips less it, and a kernel whose work ran on a thread made in the call gets nothing off."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.evaluate import EvalRequest, evaluate

from ._backends import backend_or_skip

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "vector_add_small"
RUNTIME_ONLY = str(ROOT / "tests" / "policies" / "runtime-only.toml")

pytestmark = pytest.mark.bwrap


def test_an_honest_cpu_kernels_times_are_its_round_trips_less_their_waits() -> None:
    r = evaluate(EvalRequest.from_paths(task_dir=TASK, candidate=TASK / "candidates" / "good.py",
                                        backend=backend_or_skip("bwrap"), device="cpu"))
    assert r.ok, r.errors
    assert r.timing is not None
    c = r.timing.clocks
    n = len(c["samples_ms"])
    assert len(c["wait_ms"]) == len(c["judge_ms"]) == len(c["noop_wait_ms"]) >= n
    assert all(0.0 <= w <= j for w, j in zip(c["wait_ms"], c["judge_ms"], strict=True))
    # each deciding time is its round trip less its wait, less one base: their differences agree
    for i in range(1, n):
        lhs = c["samples_ms"][i] - c["samples_ms"][0]
        rhs = (c["judge_ms"][i] - c["wait_ms"][i]) - (c["judge_ms"][0] - c["wait_ms"][0])
        if min(c["samples_ms"][i], c["samples_ms"][0]) > 1e-6:
            assert lhs == pytest.approx(rhs, abs=1e-9)


def test_work_on_a_thread_made_in_the_call_gets_no_wait_taken_off() -> None:
    r = evaluate(EvalRequest.from_paths(
        task_dir=TASK, candidate=ROOT / "tests" / "e2e" / "timing_candidates" / "helper_thread_spin.py",
        backend=backend_or_skip("bwrap"), device="cpu", policy=RUNTIME_ONLY))
    assert r.ok, r.errors  # legitimate: the thread is joined before the call returns
    assert r.timing is not None
    assert r.timing.clocks["wait_ms"] and not any(r.timing.clocks["wait_ms"]), r.timing.clocks
