"""The CPU round trip's wait for a CPU (sandbox.judge.cpu_wait): what is taken off, and when
nothing is. The arithmetic on made-up counters; the counters themselves from this host's
kernel, with real processes competing for one CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from sandbox.judge import cpu_wait
from sandbox.judge.cpu_wait import Mark

MS = 1_000_000  # ns


def _m(judge: float, run: float, wait: float, others: dict[int, float] | None = None,
       last: int = 100) -> Mark:
    return Mark(int(judge * MS), int(run * MS), int(wait * MS),
                {t: int(v * MS) for t, v in (others or {}).items()}, last)


def test_the_judges_and_the_runners_waits_are_taken_off() -> None:
    before = _m(1.0, 10.0, 5.0, {7: 2.0})
    after = _m(3.0, 10.5, 9.0, {7: 2.0})  # judge waited 2 ms, runner 4 ms, ran 0.5 ms
    assert cpu_wait.waited_ms(before, after, round_trip_ms=7.0) == pytest.approx(6.0)


def test_never_more_than_leaves_the_runners_own_run_time() -> None:
    """Waits that overlap (the judge and the runner both waiting) or began before the call
    cannot take the time below what the runner ran in it."""
    before = _m(0.0, 10.0, 0.0)
    after = _m(5.0, 13.0, 5.0)  # 10 ms of waits, 3 ms run, in a 7 ms round trip
    assert cpu_wait.waited_ms(before, after, round_trip_ms=7.0) == pytest.approx(4.0)


def test_the_runners_other_threads_run_time_stays_in_the_time() -> None:
    """A harness thread the candidate put to work kept the calling thread off the CPU: that
    wait is the candidate's own work, not the host's load."""
    before = _m(0.0, 10.0, 0.0, {7: 1.0, 8: 1.0})
    after = _m(0.0, 10.2, 3.0, {7: 3.5, 8: 1.0})
    assert cpu_wait.waited_ms(before, after, round_trip_ms=4.0) == pytest.approx(0.5)


@pytest.mark.parametrize("after", [
    _m(3.0, 10.5, 9.0, last=101),            # a thread or process was created in the call
    _m(3.0, 10.5, 9.0, {7: 2.0, 9: 0.0}),    # a runner thread came ...
    _m(3.0, 10.5, 9.0, {}),                  # ... or went
    None,                                    # the kernel did not say
])
def test_nothing_is_taken_off_where_whose_wait_it_was_is_unknown(after: Mark | None) -> None:
    assert cpu_wait.waited_ms(_m(1.0, 10.0, 5.0, {7: 2.0}), after, round_trip_ms=7.0) == 0.0


def _spinner() -> subprocess.Popen[bytes]:
    """A process that spins on a CPU, returned once it spins: on a loaded host the
    interpreter's own start (which reads files, and sleeps) can outlast a fixed wait."""
    p = subprocess.Popen([sys.executable, "-c", "print(1, flush=True)\nwhile True: pass"],
                         stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline()
    return p


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="no schedstat")
def test_the_kernels_counters_see_a_process_wait_for_a_shared_cpu() -> None:
    """Two spinning processes on one CPU: a spinner never sleeps, so its run time and its
    wait fill the interval, and it waits at least while the other runs (more on a loaded
    host), as the judge's marks of it say."""
    a, b = _spinner(), _spinner()
    try:
        cpu = sorted(os.sched_getaffinity(0))[0]
        os.sched_setaffinity(a.pid, {cpu})
        os.sched_setaffinity(b.pid, {cpu})
        time.sleep(0.1)
        first, t0 = cpu_wait.mark(a.pid), time.monotonic()
        time.sleep(0.5)
        second, elapsed = cpu_wait.mark(a.pid), (time.monotonic() - t0) * 1e3
    finally:
        for q in (a, b):
            q.kill()
            q.wait()
    assert first is not None and second is not None
    waited = (second.runner_wait - first.runner_wait) / MS
    ran = (second.runner_run - first.runner_run) / MS
    assert waited + ran > 0.8 * elapsed and waited > 0.3 * elapsed, (waited, ran, elapsed)


def test_a_thread_started_between_two_marks_takes_the_correction_away() -> None:
    first = cpu_wait.mark(os.getpid())
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
    second = cpu_wait.mark(os.getpid())
    assert first is not None and second is not None and second.last_pid != first.last_pid
    assert cpu_wait.waited_ms(first, second, round_trip_ms=100.0) == 0.0


def test_the_judge_parks_until_the_runner_sleeps_and_never_waits_forever() -> None:
    """``park``: the mark waits for the runner's calling thread to be asleep (in its read);
    one that never sleeps is marked anyway after PARK_S."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; print(1, flush=True); "
                                "time.sleep(60)"], stdout=subprocess.PIPE)
    spinner = _spinner()
    try:
        assert sleeper.stdout is not None and sleeper.stdout.readline()
        t_end = time.monotonic() + 20  # a loaded host may take a while to put it to sleep
        while not cpu_wait._asleep(sleeper.pid) and time.monotonic() < t_end:
            time.sleep(0.05)
        assert cpu_wait._asleep(sleeper.pid)
        assert not cpu_wait._asleep(spinner.pid)
        assert cpu_wait.mark(sleeper.pid, park=True) is not None
        assert cpu_wait.mark(spinner.pid, park=True) is not None
    finally:
        for q in (sleeper, spinner):
            q.kill()
            q.wait()
