"""Owner tokens: which host process made a sandbox leftover, and whether it still runs.

A token is ``host:pid:start-time`` (a pid alone is reused; with its start time it is not).
Evaluation folders carry one in their marker (:mod:`grader.backends.cleanup`), docker
containers in their ``kgrader.owner`` label (:mod:`grader.backends.docker.config`), bwrap
cgroups in their name. A leaf: it imports nothing of kgrader, so every backend may use it.
"""

from __future__ import annotations

import os
import socket

import psutil

_owner_cache: dict[int, str] = {}


def owner_of(pid: int) -> str:
    """``host:pid:start-time`` of a process (``?`` as start time when it is gone)."""
    try:
        started = f"{psutil.Process(pid).create_time():.2f}"
    except psutil.Error:
        started = "?"
    return f"{socket.gethostname()}:{pid}:{started}"


def current_owner() -> str:
    """This process's owner token (recomputed after a fork: the pid changed)."""
    pid = os.getpid()
    if pid not in _owner_cache:
        _owner_cache[pid] = owner_of(pid)
    return _owner_cache[pid]


def owner_gone(owner: str | None) -> bool:
    """Whether ``owner`` names a process of this host that provably no longer runs.

    Stricter than ``not owner_alive``: a malformed token, another host's token or one
    without a start time is never "gone" (nothing proves it), so an automatic sweep
    leaves its things to ``kgrader sandbox cleanup``.
    """
    if not owner or owner.count(":") < 2:
        return False
    host, pid, started = owner.rsplit(":", 2)
    if host != socket.gethostname() or not pid.isdigit() or started == "?":
        return False
    return owner_of(int(pid)) != owner


def owner_alive(owner: str | None) -> bool:
    """Whether the process an owner token names still runs on this host."""
    if not owner or owner.count(":") < 2:
        return False
    host, pid, started = owner.rsplit(":", 2)
    if host != socket.gethostname() or not pid.isdigit() or started == "?":
        return False
    return owner_of(int(pid)) == owner
