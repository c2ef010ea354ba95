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
* the judge reads the runner's CPU clock (``clock_gettime`` on its process CPU clock: every
  thread, exited ones too, in ns; no permission is needed, one syscall) when it has the
  reply, again before it touches the next call's buffers, and again just before it sends
  the request. More than :data:`TAIL_NS` in the first interval (the runner's own tail: its
  send returning and re-entering its read) or :data:`GAP_NS` in the second (the runner is
  asleep in its read while the judge writes) is candidate code that ran between calls:
  ``work_between_calls``; so does any run at all of the runner's calling thread in the
  second (its schedstat run time): it sleeps in its read until the request comes, so code
  that sleeps between looks at the outputs and computes in under :data:`GAP_NS` is seen.
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

import signal
import time
from dataclasses import dataclass
from typing import Protocol

from sandbox.contract.failure import StageFailure, infrastructure
from sandbox.contract.wire import ErrorStage
from sandbox.judge import cpu_wait
from sandbox.launcher import caps
from sandbox.launcher.proc import RunnerHandle

# The runner's CPU between the judge's reading of its reply and the next request's first
# write: its reply's send returning, its loop and re-entering its read, and any spin of its
# intra-op pool's threads after a parallel region. Honest runners used at most 0.14 ms on
# an idle 2-core host and 0.13 ms beside two busy loops (bwrap, CPU; docs/security-review.md).
TAIL_NS = 5_000_000
# The runner's CPU while the judge writes the next inputs: it is asleep in its read
# (honest: 0 ns in every call measured, idle and loaded). Its calling thread may not run at
# all then.
GAP_NS = 1_000_000
# How long the judge waits for the calling thread to be asleep before it writes anything.
ASLEEP_S = 2.0
_CPUCLOCK_SCHED = 2  # the kernel's encoding of a process CPU clock id (posix-timers.h)
# Signals 32 and 33: glibc's own (SIGCANCEL, SIGSETXID), caught once the first thread is made
# or cancelled, at any time; glibc's sigaction refuses them to programs. Not counted.
LIBC_SIGNALS = (1 << 31) | (1 << 32)


class Watched(Protocol):
    """What this module reads and writes of a side (``sandbox.judge.sides.Side``)."""

    @property
    def runner(self) -> RunnerHandle: ...
    @property
    def prefix(self) -> tuple[str, ...]: ...
    base_caught: int
    idle_ns: int | None
    idle_max_ns: tuple[int, int]


def cpu_ns(pid: int) -> int:
    """The CPU time the kernel has charged to process ``pid`` (all threads), ns."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | _CPUCLOCK_SCHED)
    except OSError as e:
        raise infrastructure("runner_isolation_unavailable",
                             f"the judge cannot read runner pid {pid}'s CPU clock: {e}") from None


def caught(pid: int) -> int:
    """The kernel's mask of the signals process ``pid`` catches (bit ``n - 1``: signal n)."""
    try:
        return int(caps.status(f"/proc/{pid}/status")["SigCgt"], 16)
    except (OSError, KeyError, ValueError) as e:
        raise infrastructure("runner_isolation_unavailable",
                             f"the judge cannot read runner pid {pid}'s signal handlers: {e}") from None


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
        side.base_caught = caught(side.runner.proc.pid)


def _watched(side: Watched) -> bool:
    return not side.prefix and side.base_caught >= 0


def replied(side: Watched) -> None:
    """The judge has the runner's last answer of a call (or of its import)."""
    if _watched(side):
        side.idle_ns = cpu_ns(side.runner.proc.pid)


def check_handlers(side: Watched, stage: ErrorStage, when: str) -> None:
    """Fail when the runner catches a signal the harness did not catch before the import."""
    if not _watched(side):
        return
    new = caught(side.runner.proc.pid) & ~side.base_caught & ~LIBC_SIGNALS
    if new:
        raise StageFailure(stage, "signal_handler",
                           f"{when} the candidate's runner catches signal(s) the harness does not: "
                           f"{', '.join(names(new))}; a handler could run candidate code between "
                           "calls, outside the timed call",
                           detail={"signals": names(new)})


@dataclass(frozen=True)
class Touched:
    """The runner's counters when the judge began writing a call's buffers: its process CPU
    clock, and its calling thread's run time when that thread was asleep (else None)."""

    cpu_ns: int
    caller_ns: int | None


def before_touch(side: Watched, stage: ErrorStage) -> Touched | None:
    """Before the judge writes a call's buffers: the runner's calling thread asleep (in its
    read), no new handler, and no more CPU than its own tail since its last reply."""
    if not _watched(side):
        return None
    pid = side.runner.proc.pid
    asleep = cpu_wait.wait_asleep(pid, ASLEEP_S)
    check_handlers(side, stage, "between two calls")
    now = cpu_ns(pid)
    if side.idle_ns is not None:
        _check(side, stage, now - side.idle_ns, TAIL_NS, "between its last reply and this call", 0)
    # Not asleep after ASLEEP_S and under TAIL_NS of CPU: runnable, waiting for a CPU (a
    # loaded host). The calling thread's rule is then not certain; the CPU rule still holds.
    return Touched(now, cpu_wait.thread_run_ns(pid) if asleep else None)


def before_send(side: Watched, stage: ErrorStage, touched: Touched | None) -> None:
    """Just before the request goes out, after the judge wrote the inputs: the runner's
    calling thread never ran since :func:`before_touch` (it sleeps in its read until the
    request comes: any run is candidate code that woke to see the inputs), and its whole
    process used no more than :data:`GAP_NS` (the harness's other threads)."""
    if touched is None or not _watched(side):
        return
    pid = side.runner.proc.pid
    _check(side, stage, cpu_ns(pid) - touched.cpu_ns, GAP_NS,
           "while the judge wrote this call's inputs", 1)
    ran = cpu_wait.thread_run_ns(pid) if touched.caller_ns is not None else None
    if ran is not None and touched.caller_ns is not None and ran > touched.caller_ns:
        used = ran - touched.caller_ns
        raise StageFailure(stage, "work_between_calls",
                           f"the candidate's runner's calling thread ran {used / 1e3:.1f} us while "
                           "the judge wrote this call's inputs, where it sleeps in its read: "
                           "candidate code woke between calls, outside the timed call",
                           detail={"caller_cpu_us": round(used / 1e3, 1)})


def _check(side: Watched, stage: ErrorStage, used: int, allowed: int, when: str, which: int) -> None:
    most = list(side.idle_max_ns)
    most[which] = max(most[which], used)
    side.idle_max_ns = (most[0], most[1])
    if used > allowed:
        raise StageFailure(stage, "work_between_calls",
                           f"the candidate's runner used {used / 1e6:.3f} ms of CPU {when} "
                           f"(allowed {allowed / 1e6:.3f} ms): candidate code ran between calls "
                           "(a signal handler, a timer, a finaliser), outside the timed call",
                           detail={"cpu_ms": round(used / 1e6, 3), "allowed_ms": allowed / 1e6})
