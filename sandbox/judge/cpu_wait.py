"""How long a CPU call's round trip waited for a CPU: the part of it that is the host's load.

On the CPU the judge's clock decides the time (round trip less the interleaved empty call's).
On a loaded host much of a round trip is neither the kernel nor the harness but two threads
waiting, runnable, for a CPU: the runner's to wake and run, the judge's to wake on the
reply. A leaderboard test's tiny Triton add (8 x 256, interpreted: ~1.8 ms of round trip
over its empty calls on an idle 2-core host) came back beside two evaluations per core in
3-48 ms, its empty calls in 0.5-33 ms: most timed calls no longer than the empty calls
beside them, ``timing_unreliable``, in six runs of six; the times that did pass were the
load's (2.6-10 ms, or the 1e-6 ms clamp). Less their waits, the same calls measured 2.6-5.3
ms in four runs of four, none unreliable.

The kernel counts that wait for every thread (schedstat ``run_delay``, ns), and the judge
reads it, never the runner's word: its own thread's, and the runner's calling thread's,
before it sends a call and after it reads the answer. Before a call it first lets the
runner's calling thread go back to sleep in its read (``PARK_S``), so that a wait begun
before the call is not counted in it. What the judge takes off the round trip
(:func:`waited_ms`) is its own wait plus the runner's, less whatever the runner's other
threads ran meanwhile (work of the runner's own that kept its calling thread off a CPU
stays in the time), and never so much that less than the runner's own run time in the call
would be left (waits that overlap: the judge's after its send and the runner's, or the
runner's after its reply). Nothing is taken off (0.0) when the judge cannot tell whose the
wait was: a thread or process was created in the sandbox during the call (``ns_last_pid``
moved: a helper that computed while the caller waited, and exited before the answer), a
runner thread came or went, or the kernel did not say. A runner whose intra-op threads run
the kernel in parallel (docker's ``OMP_NUM_THREADS`` is its CPU limit) gets little or
nothing off: their run time fills the round trip.

On CUDA the events decide, and nothing here is read.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

# How long the judge waits, before a call, for the runner's calling thread to be back in its
# read (asleep) from the last call, so that a wait that began before the call is not counted
# in it.
PARK_S = 0.05


@dataclass(frozen=True)
class Mark:
    """The counters at one instant (ns): the judge's wait, the runner's calling thread's run
    time and wait, the run time of each of the runner's other threads; the namespace's last
    pid."""

    judge_wait: int
    runner_run: int
    runner_wait: int
    others: dict[int, int]
    last_pid: int


def _schedstat(path: str) -> tuple[int, int]:
    """(time on a CPU, time waiting runnable for one), ns, from a schedstat file."""
    with open(path, encoding="ascii") as f:
        run, wait = f.read().split()[:2]
    return int(run), int(wait)


def _state(runner_pid: int) -> str:
    with open(f"/proc/{runner_pid}/task/{runner_pid}/stat", encoding="ascii") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _asleep(runner_pid: int) -> bool:
    return _state(runner_pid) in ("S", "D")


def exited(runner_pid: int) -> bool:
    """Whether the runner has exited: gone, or a zombie with no thread left (a main thread
    that exited while others run is not an exit)."""
    try:
        return _state(runner_pid) in ("Z", "X") \
            and os.listdir(f"/proc/{runner_pid}/task") == [str(runner_pid)]
    except FileNotFoundError:
        return True
    except (OSError, ValueError, IndexError):
        return False


def wait_asleep(runner_pid: int, limit_s: float = PARK_S) -> bool:
    """Wait (up to ``limit_s``) for the runner's calling thread to be asleep (in its read);
    whether it is (False where its state cannot be read)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        t_end = time.monotonic() + limit_s
        while not _asleep(runner_pid):
            if time.monotonic() >= t_end or _state(runner_pid) in ("Z", "X"):
                return False  # still running, or it has exited (its next answer says how)
            time.sleep(0.0002)
        return True
    return False


def thread_runs(runner_pid: int) -> dict[int, int] | None:
    """Each of the runner's threads' time on a CPU so far, ns, by thread id (the calling
    thread's id is the runner's pid); None where the kernel does not say."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        out = {}
        for t in os.listdir(f"/proc/{runner_pid}/task"):
            with contextlib.suppress(FileNotFoundError):  # a thread that just exited
                out[int(t)] = _schedstat(f"/proc/{runner_pid}/task/{t}/schedstat")[0]
        return out if runner_pid in out else None
    return None


def mark(runner_pid: int, park: bool = False) -> Mark | None:
    """The counters now, None where any of them cannot be read. ``park``: first wait
    (:func:`wait_asleep`) for the runner's calling thread to be asleep."""
    if park:
        wait_asleep(runner_pid)
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/sys/kernel/ns_last_pid", encoding="ascii") as f:
            last = int(f.read())
        judge_wait = _schedstat("/proc/thread-self/schedstat")[1]
        run, wait = _schedstat(f"/proc/{runner_pid}/task/{runner_pid}/schedstat")
        others = {int(t): _schedstat(f"/proc/{runner_pid}/task/{t}/schedstat")[0]
                  for t in os.listdir(f"/proc/{runner_pid}/task") if int(t) != runner_pid}
        return Mark(judge_wait, run, wait, others, last)
    return None


def waited_ms(before: Mark | None, after: Mark | None, round_trip_ms: float) -> float:
    """The round trip's wait for a CPU between two marks, ms (0.0 where it is not known),
    never so much that less than the runner's own run time in it would be left."""
    if before is None or after is None or before.last_pid != after.last_pid \
            or set(before.others) != set(after.others):
        return 0.0
    others = sum(after.others[t] - before.others[t] for t in before.others)
    runner = max(0, after.runner_wait - before.runner_wait - others)
    wait = max(0, after.judge_wait - before.judge_wait + runner) / 1e6
    ran = (after.runner_run - before.runner_run + others) / 1e6
    return max(0.0, min(wait, round_trip_ms - ran))


def before_call(device: str, runner_pid: int) -> Mark | None:
    """The judge's mark before a call: parked, on the CPU only (its judge's clock decides)."""
    return mark(runner_pid, park=True) if device == "cpu" else None


def after_call(before: Mark | None, runner_pid: int, round_trip_ms: float) -> float:
    """The call's wait for a CPU, ms, from :func:`before_call`'s mark (0.0 without one)."""
    if before is None:
        return 0.0
    return waited_ms(before, mark(runner_pid), round_trip_ms)
