"""Between two calls a runner is idle, and catches no signal the harness did not catch.

Candidate code that runs while a runner waits for its next request -- a signal handler fired
by an interval timer, an I/O signal or a helper process, a native ``sigaction`` handler, a
finaliser -- runs in the runner's own threads, where no thread count sees it. It can compute
the next answer once the judge has written the inputs and before the judge's clock starts
(a SIGALRM handler did, and was accepted 0.88 faster than an honest current best), or burn
a CPU while the other side of a pair is timed. Three layers stop the family:

* the runner's seccomp filter refuses the syscalls that arm deferred signals
  (:mod:`sandbox.launcher.seccomp`): no timer, no I/O signal, no exit signal but SIGCHLD;
* the judge reads ``SigCgt`` in ``/proc/<runner>/status`` (the kernel's own mask of caught
  signals, which sees a handler installed through ctypes ``sigaction`` as well as Python's)
  after the runner's setup, before the candidate is imported: the harness's baseline
  (Python's SIGINT). A signal caught beyond it after the import or before any call fails
  with ``signal_handler``; glibc's own two (:data:`LIBC_SIGNALS`) are not counted. A new
  handler for a signal already caught (SIGINT; 32 and 33 through a raw ``rt_sigaction``) is
  invisible here: it needs a sender, and
  every sender but a process is refused by the filter (a process under the runner's uid
  fails ``runner_spawned_process`` after a timed call);
* the judge reads the runner's CPU -- its process CPU clock (``clock_gettime`` on
  ``((~pid) << 3) | 2``: every thread, exited ones too, ns, no permission needed) and each
  live thread's run time (schedstat) -- when it has a call's last answer, again before it
  touches the next call's buffers, and again just before it sends the request. The calling
  thread (where Python handlers and finalisers run) may use :data:`TAIL_NS` in the first
  interval (its send returning, re-entering its read) and nothing at all in the second (it
  sleeps in its read until the request comes: code that sleeps between looks at the
  outputs is seen however little it computes); each of the harness's other threads
  :data:`OTHER_NS` (an OpenMP worker spins after its last parallel region); threads that
  ended within an interval :data:`EXITED_NS`; no thread may start between calls. Over any
  of them: ``work_between_calls``. A runner that exited after its reply is not read: its
  next exchange says how it ended (the candidate's failure, never the judge's).
  Run time is not inflated by waiting for a CPU, so a loaded host does not move it
  (figures in ``docs/security-review.md``). Before it touches the buffers the judge waits
  (up to :data:`ASLEEP_S`) for the calling thread to be asleep, so the inputs are written
  only once the runner is proven idle, and anything that computes on them before the
  request shows in the second interval.

Reaped children's time is not in a process's CPU clock: processes are
:mod:`sandbox.judge.isolation`'s (``runner_spawned_process``). A diagnostics tool's runner
(``prefix``) is not watched: the tool's own process runs beside it, and it is never timed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from typing import Protocol

from sandbox.contract.failure import StageFailure, infrastructure
from sandbox.contract.wire import ErrorStage
from sandbox.judge import cpu_wait
from sandbox.launcher.proc import RunnerHandle

# The calling thread's CPU between the judge's reading of the reply and the next call's
# first write: its send returning, its loop, re-entering its read. Honest: at most 0.17 ms
# (bwrap and docker, idle and beside two busy loops; docs/security-review.md).
TAIL_NS = 5_000_000
# Each of the harness's other threads (torch's intra-op pool, the CUDA driver's) in either
# interval: an OpenMP worker spins after its last parallel region (GOMP_SPINCOUNT; docker
# runs OMP_NUM_THREADS workers: 5-7 ms seen). Candidate code reaches them natively only.
OTHER_NS = 50_000_000
# CPU of threads that ended within an interval (the process clock less its live threads'):
# a thread the candidate started and that exited before the judge counted threads.
EXITED_NS = 1_000_000
# While the judge writes a call's inputs the calling thread sleeps in its read: none at all.
GAP_NS = 0
# How long the judge waits for the calling thread to be asleep before it writes anything.
ASLEEP_S = 2.0
_CPUCLOCK_SCHED = 2  # the kernel's encoding of a process CPU clock id (posix-timers.h)
# Signals 32 and 33: glibc's own (SIGCANCEL, SIGSETXID), caught once the first thread is made
# or cancelled, at any time; glibc's sigaction refuses them to programs. Not counted.
LIBC_SIGNALS = (1 << 31) | (1 << 32)


@dataclass(frozen=True)
class Counters:
    """The runner's CPU at one instant, ns: its process clock (every thread, exited ones
    too) and each live thread's run time (None where the kernel's schedstat is missing)."""

    process: int
    threads: dict[int, int] | None
    asleep: bool = True  # the calling thread was asleep when these were read


class Watched(Protocol):
    """What this module reads and writes of a side (``sandbox.judge.sides.Side``)."""

    @property
    def runner(self) -> RunnerHandle: ...
    @property
    def prefix(self) -> tuple[str, ...]: ...
    base_caught: int
    idle_at: Counters | None
    idle_max_ns: tuple[int, int]


class RunnerGone(Exception):
    """The runner has exited: its next exchange with the judge reports how (the candidate's
    failure), so nothing is read or blamed here."""


def _unreadable(pid: int, what: str, e: Exception) -> Exception:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return RunnerGone(pid)
    except PermissionError:
        pass  # another uid's: alive
    return infrastructure("runner_isolation_unavailable",
                          f"the judge cannot read runner pid {pid}'s {what}: {e}")


def cpu_ns(pid: int) -> int:
    """The CPU time the kernel has charged to process ``pid`` (all threads), ns."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | _CPUCLOCK_SCHED)
    except OSError as e:
        raise _unreadable(pid, "CPU clock", e) from None


def caught(pid: int) -> int:
    """The kernel's mask of the signals process ``pid`` catches (bit ``n - 1``: signal n)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            text = f.read()
        at = text.index("\nSigCgt:") + 8
        return int(text[at:text.index("\n", at)], 16)
    except (OSError, ValueError) as e:
        raise _unreadable(pid, "signal handlers", e) from None


def names(mask: int) -> list[str]:
    out = []
    for n in range(1, 65):
        if mask >> (n - 1) & 1:
            try:
                out.append(signal.Signals(n).name)
            except ValueError:
                out.append(f"signal {n}")
    return out


def baseline(side: Watched) -> None:
    """After the runner's setup, before the candidate's import: the harness's handlers."""
    if not side.prefix:
        with contextlib.suppress(RunnerGone):
            side.base_caught = caught(side.runner.proc.pid)


def _watched(side: Watched) -> bool:
    return not side.prefix and side.base_caught >= 0


def counters(pid: int) -> Counters:
    threads = cpu_wait.thread_runs(pid)  # first: the process clock read after them covers them
    return Counters(cpu_ns(pid), threads)


def replied(side: Watched) -> None:
    """The judge has the runner's last answer of a call (or of its import)."""
    if _watched(side):
        try:
            side.idle_at = counters(side.runner.proc.pid)
        except RunnerGone:
            side.idle_at = None


def check_handlers(side: Watched, stage: ErrorStage, when: str) -> None:
    """Fail when the runner catches a signal the harness did not catch before the import."""
    if not _watched(side):
        return
    try:
        new = caught(side.runner.proc.pid) & ~side.base_caught & ~LIBC_SIGNALS
    except RunnerGone:
        return
    if new:
        raise StageFailure(stage, "signal_handler",
                           f"{when} the candidate's runner catches signal(s) the harness does not: "
                           f"{', '.join(names(new))}; a handler could run candidate code between "
                           "calls, outside the timed call",
                           detail={"signals": names(new)})


def before_touch(side: Watched, stage: ErrorStage) -> Counters | None:
    """Before the judge writes a call's buffers: the runner's calling thread asleep (in its
    read), no new handler, and no more CPU than the harness's own since its last reply."""
    if not _watched(side):
        return None
    pid = side.runner.proc.pid
    asleep = cpu_wait.wait_asleep(pid, ASLEEP_S)
    if not asleep and cpu_wait.exited(pid):
        return None  # it exited after its reply: the next exchange reports how (its failure)
    check_handlers(side, stage, "between two calls")
    try:
        now = counters(pid)
    except RunnerGone:
        return None
    if side.idle_at is not None:
        _check(side, stage, side.idle_at, now, TAIL_NS, "between its last reply and this call", 0)
    # Not asleep after ASLEEP_S, within TAIL_NS: runnable, waiting for a CPU (a loaded host).
    # Whether its calling thread will still run is then not certain: it gets TAIL_NS.
    return now if asleep else Counters(now.process, now.threads, asleep=False)


def before_send(side: Watched, stage: ErrorStage, touched: Counters | None) -> None:
    """Just before the request goes out, after the judge wrote the inputs: the calling
    thread never ran since :func:`before_touch` (it sleeps in its read until the request
    comes: any run is candidate code that woke to see the inputs)."""
    if touched is None or not _watched(side):
        return
    try:
        now = counters(side.runner.proc.pid)
    except RunnerGone:
        return
    _check(side, stage, touched, now, GAP_NS if touched.asleep else TAIL_NS,
           "while the judge wrote this call's inputs", 1)


def _check(side: Watched, stage: ErrorStage, a: Counters, b: Counters, caller_ns: int,
           when: str, which: int) -> None:
    """From ``a`` to ``b``: the calling thread within ``caller_ns``, each other live thread
    within :data:`OTHER_NS`, threads that ended within :data:`EXITED_NS`."""
    pid = side.runner.proc.pid
    used = b.process - a.process
    if a.threads is None or b.threads is None or pid not in a.threads or pid not in b.threads:
        # No per-thread figures: the process as a whole, each thread given the most it may use
        n = max(len(a.threads or {}), len(b.threads or {}), 1)
        _record(side, which, used)
        if used > caller_ns + OTHER_NS * (n - 1) + EXITED_NS:
            _fail(stage, f"used {used / 1e6:.3f} ms of CPU {when}", used)
        return
    born = sorted(b.threads.keys() - a.threads.keys())
    if born:  # made by code that ran between calls; the thread count is taken at replies
        _fail(stage, f"started {len(born)} thread(s) {when}", b.threads[born[0]])
    caller = b.threads[pid] - a.threads[pid]
    others = {t: b.threads[t] - a.threads[t] for t in a.threads.keys() & b.threads.keys() if t != pid}
    exited = used - caller - sum(others.values())  # ended (or began) within the interval
    _record(side, which, caller)
    if caller > caller_ns:
        _fail(stage, f"ran its calling thread {caller / 1e6:.3f} ms {when} (allowed "
              f"{caller_ns / 1e6:.3f} ms)", caller)
    busiest = max(others.values(), default=0)
    if busiest > OTHER_NS:
        _fail(stage, f"ran one of the harness's threads {busiest / 1e6:.3f} ms {when}", busiest)
    if exited > EXITED_NS:
        _fail(stage, f"used {exited / 1e6:.3f} ms of CPU {when} in threads that ended meanwhile",
              exited)


def _record(side: Watched, which: int, ns: int) -> None:
    most = list(side.idle_max_ns)
    most[which] = max(most[which], ns)
    side.idle_max_ns = (most[0], most[1])


def _fail(stage: ErrorStage, what: str, ns: int) -> None:
    raise StageFailure(stage, "work_between_calls",
                       f"the candidate's runner {what}: candidate code ran between calls (a "
                       "signal handler, a timer, a finaliser), outside the timed call",
                       detail={"cpu_ms": round(ns / 1e6, 3)})
