"""Whose fault a busy device between paired calls is (sandbox/judge/acceptance.check_idle):
the last side's only for a time slice of another context with no foreign process, beyond
the judge's own wait for a CPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sandbox.contract.failure import StageFailure
from sandbox.judge.acceptance import BLAME_MS, check_idle


def _probe(busy: float | None, wait: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(busy=lambda: busy, limit_ms=0.25, idle_ms=0.015, cpu_wait_ms=wait)


def _fails(busy: float, foreign: str | None, last_is_cur: bool = False,
           wait: float = 0.0) -> StageFailure:
    cand, cur = object(), object()
    with pytest.raises(StageFailure) as e:
        check_idle(_probe(busy, wait), cur if last_is_cur else cand, cur,  # type: ignore[arg-type]
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


def test_a_long_probe_the_judge_spent_waiting_for_a_cpu_is_the_host_not_the_candidate() -> None:
    """A host whose CPUs are all busy: 2.4 ms on the probe's clock, 1.9 ms of it the judge's
    thread runnable but not running. The device kept it waiting 0.5 ms: no time slice."""
    err = _fails(2.4, None, wait=1.9).error
    assert (err.code, err.origin) == ("timing_unreliable", "infrastructure")
    assert err.detail is not None and err.detail["judge_cpu_wait_ms"] == 1.9
    assert "wait for a CPU" in err.message


def test_a_time_slice_beyond_the_judges_cpu_wait_is_still_the_last_side() -> None:
    err = _fails(BLAME_MS + 2.5, None, wait=1.0).error
    assert (err.code, err.origin) == ("gpu_busy_between_calls", "candidate")
    assert err.detail is not None and err.detail["judge_cpu_wait_ms"] == 1.0


def test_the_kernel_counts_a_threads_wait_for_a_cpu() -> None:
    """What the probe reads, on this kernel: a thread made to share one CPU with a busy
    process waits for it (runnable, not running), and the count grows by about half."""
    import os
    import subprocess
    import sys
    import time

    from sandbox.judge.gpu_idle import run_queue_wait_ms

    if run_queue_wait_ms() is None:
        pytest.skip("this kernel has no schedstat")
    mine = os.sched_getaffinity(0)
    cpu = min(mine)
    hog = subprocess.Popen([sys.executable, "-c", "import os, time\n"
                            f"os.sched_setaffinity(0, {{{cpu}}}); t = time.monotonic()\n"
                            "while time.monotonic() - t < 3.0: pass"])
    os.sched_setaffinity(0, {cpu})
    try:
        time.sleep(0.3)  # the hog is running
        w0 = run_queue_wait_ms()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.5:  # runnable all along
            pass
        w1 = run_queue_wait_ms()
    finally:
        os.sched_setaffinity(0, mine)
        hog.kill()
        hog.wait()
    assert w0 is not None and w1 is not None and w1 - w0 > 100.0, (w0, w1)
