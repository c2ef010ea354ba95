"""Which limit ended a run: one decision, in one order, for every backend.

A backend collects :class:`Evidence` (what its timer, cgroup, watchdogs and the exit
status said) and calls :func:`classify`. When several limits left evidence, the first in
this order is reported:

1. ``timeout`` -- the host's wall timer fired and killed the whole tree at that instant,
   whatever else was going on; it is certain that it ended the run. The other kinds of
   evidence are sticky (a counter or a flag that stays set once an event happened) and may
   come from an earlier event the sandbox survived (one runner OOM-killed, one fork refused).
2. ``memory_limit`` -- the kernel's OOM killer killed a process of the tree (cgroup OOM),
   or the host's RSS watchdog killed the tree. An actual kill, so it outranks:
3. ``gpu_memory_limit`` -- the host's NVML watchdog killed the tree.
4. ``pids_limit`` -- the cgroup refused a fork/clone (then the host killed the tree at
   once), or the thread-count watchdog fired. A refused fork alone is only a failed system
   call a program may survive, so it ranks below the kills above.
5. ``disk_limit`` -- the process died of ``SIGXFSZ`` (``RLIMIT_FSIZE``). A full tmpfs is
   an ``ENOSPC`` error, not a death: the judge reports it from the runner's exception.
6. output -- never a cause: both backends drain stdout/stderr past the cap
   (:mod:`grader.backends.output`), so a flood neither blocks nor ends the run. It is
   reported as ``output_truncated`` beside whatever limit (or none) ended the run.
7. any other signal -- not a limit: ``limit_fired`` is ``None`` and ``signal`` says which.

:func:`decode_status` gives both backends the same reading of an exit status: a status
of 128+N (N a signal number) is death by signal N. Docker's init and bwrap's monitor both
report a child killed by a signal that way, so a process that calls ``exit(137)`` itself
cannot be told apart from one killed by ``SIGKILL``; both read as signal 9.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from grader.limits import LimitName

ORDER: tuple[LimitName, ...] = (
    "timeout",
    "memory_limit",
    "gpu_memory_limit",
    "pids_limit",
    "disk_limit",
)


@dataclass(frozen=True)
class Evidence:
    """What a backend observed about one finished run."""

    timed_out: bool = False
    oom_killed: bool = False
    gpu_memory_exceeded: bool = False
    pids_limited: bool = False
    signal: int | None = None
    memory_limit_hits: int = 0  # times usage reached the limit without a kill
    oom_counted: bool = False  # the kernel's OOM-kill count was readable (a memory cgroup)
    cgroup_lost: bool = False  # the sandbox's cgroup was removed from outside before its end
    device_shared_by: tuple[str, ...] = ()  # another job's compute processes on its GPUs


def classify(evidence: Evidence) -> LimitName | None:
    """The limit that ended the run, by :data:`ORDER`; ``None`` when none did."""
    fired = {
        "timeout": evidence.timed_out,
        "memory_limit": evidence.oom_killed,
        "gpu_memory_limit": evidence.gpu_memory_exceeded,
        "pids_limit": evidence.pids_limited,
        "disk_limit": evidence.signal == signal.SIGXFSZ,
    }
    for name in ORDER:
        if fired[name]:
            return name
    return None


def decode_status(status: int | None) -> tuple[int | None, int | None]:
    """``(exit_code, signal)`` from a wait status as a backend sees it.

    ``status`` is a container's ``StatusCode`` or a ``Popen.returncode`` (negative: the
    process itself died by that signal). 128 < status <= 128+64 reads as a signal.
    """
    if status is None:
        return None, None
    if status < 0:
        return None, -status
    if 128 < status <= 128 + 64:
        return None, status - 128
    return status, None
