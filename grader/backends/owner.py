"""Owner tokens: which host process made a sandbox leftover, and whether it still runs.

A token is ``host:pid:start`` (a pid alone is reused; with its start it is not), ``start``
being the process's start in clock ticks since boot and the boot's id: unlike a wall-clock
creation time, it never changes while the process lives.
Evaluation folders carry one in their marker (:mod:`grader.backends.cleanup`), docker
containers in their ``kgrader.owner`` label (:mod:`grader.backends.docker.config`), bwrap
cgroups in their name. A leaf: it imports nothing of kgrader, so every backend may use it.
"""

from __future__ import annotations

import os
import socket

import psutil

_owner_cache: dict[int, str] = {}
_boot: list[str] = []

# A token's start time before 2026-12-01 was the wall-clock creation time (``%.2f``), which
# Linux derives from ``/proc/stat``'s ``btime``: recomputed on every read as the wall clock
# minus the uptime, it moves by a second whenever NTP slews the clock, so a live process's
# token stopped matching and every start-up sweep took all live sandboxes for orphans.
# Such legacy tokens still match within this many seconds.
LEGACY_SLACK_S = 2.0


def boot_id() -> str:
    """The first 8 hex digits of this boot's id (a token of before a reboot never matches)."""
    if not _boot:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                _boot.append(f.read().strip().replace("-", "")[:8] or "0")
        except OSError:
            _boot.append("0")
    return _boot[0]


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat``, field 22): fixed
    for the process's life, whatever the wall clock does; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def owner_of(pid: int) -> str:
    """``host:pid:start`` of a process, ``start`` being ``<ticks since boot>-<boot id>``
    (``?`` when it is gone)."""
    ticks = start_ticks(pid)
    started = "?" if ticks is None else f"{ticks}-{boot_id()}"
    return f"{socket.gethostname()}:{pid}:{started}"


def current_owner() -> str:
    """This process's owner token (recomputed after a fork: the pid changed)."""
    pid = os.getpid()
    if pid not in _owner_cache:
        _owner_cache[pid] = owner_of(pid)
    return _owner_cache[pid]


def _parse(owner: str | None) -> tuple[int, str] | None:
    """``(pid, start)`` of a well-formed token of this host with a start time, else None."""
    if not owner or owner.count(":") < 2:
        return None
    host, pid, started = owner.rsplit(":", 2)
    if host != socket.gethostname() or not pid.isdigit() or started == "?":
        return None
    return int(pid), started


def _same(pid: int, started: str) -> bool | None:
    """Whether process ``pid`` is the one that started at ``started``; None when a legacy
    token's time cannot be read as one."""
    ticks, _, boot = started.partition("-")
    if ticks.isdigit() and boot.isalnum():
        return owner_of(pid).rsplit(":", 1)[1] == started
    try:
        legacy = float(started)
    except ValueError:
        return None
    try:
        created = float(psutil.Process(pid).create_time())
    except psutil.Error:
        return False
    return abs(created - legacy) <= LEGACY_SLACK_S


def owner_gone(owner: str | None) -> bool:
    """Whether ``owner`` names a process of this host that provably no longer runs.

    Stricter than ``not owner_alive``: a malformed token, another host's token or one
    without a start time is never "gone" (nothing proves it), so an automatic sweep
    leaves its things to ``kgrader sandbox cleanup``.
    """
    parsed = _parse(owner)
    if parsed is None:
        return False
    return _same(*parsed) is False


def owner_alive(owner: str | None) -> bool:
    """Whether the process an owner token names still runs on this host."""
    parsed = _parse(owner)
    return parsed is not None and _same(*parsed) is True
