"""Stopping everything this process started, when it is told to stop (SIGINT, SIGTERM).

An interrupted grader must leave nothing grading on its own: a worker thread's sandbox
does not see the signal, and a thread pool waits for its running evaluations before the
interrupted code can unwind. So a stop is three steps, in order:

1. :func:`request_stop` (the CLI's signal handler calls it): from then on no evaluation
   folder is made (:func:`ensure_running`, called by ``make_eval_dirs``), and a reaper
   thread kills, every :data:`REAP_EVERY_S` until the process exits, every sandbox this
   process owns: its descendant processes, its cgroups, its containers. A sandbox that
   some thread starts after the request dies within one period;
2. the interrupted code unwinds: each backend's ``finally`` removes its container and
   cgroup, ``evaluate``'s removes its folder;
3. :func:`reclaim_own`, just before exit: whatever is still marked with this process as
   its owner (a folder whose ``finally`` the signal itself cut short) is removed.

What only SIGKILL can leave behind is reclaimed by the next kgrader process
(:func:`grader.backends.cleanup.sweep_orphans`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import structlog

from grader.backends import cgroups
from grader.backends.cleanup import (
    FOLDER_PREFIXES,
    current_owner,
    marked_here,
    owner_alive,
    read_marker,
    temp_base,
)
from grader.errors import InfrastructureError

log = structlog.get_logger("kgrader.stop")
REAP_EVERY_S = 0.2
_stop = threading.Event()
_reaper_lock = threading.Lock()
_reaper: list[threading.Thread] = []


class Stopped(InfrastructureError):
    """This process was told to stop: no new sandbox is started."""

    code = "interrupted"


def stop_requested() -> bool:
    """Whether :func:`request_stop` was called in this process."""
    return _stop.is_set()


def ensure_running() -> None:
    """Raise :class:`Stopped` once a stop was requested (before a sandbox is prepared)."""
    if _stop.is_set():
        raise Stopped("interrupted: kgrader is stopping, no new evaluation is started")


def request_stop() -> None:
    """Refuse new sandboxes and start the reaper (idempotent; safe in a signal handler:
    it takes no lock the interrupted thread may hold, the reaper thread does the work)."""
    _stop.set()
    if _reaper_lock.acquire(blocking=False):  # never blocks in a handler
        try:
            if not _reaper:
                t = threading.Thread(target=_reap_forever, name="kgrader-stop", daemon=True)
                _reaper.append(t)
                t.start()
        finally:
            _reaper_lock.release()


def _reap_forever() -> None:
    while True:
        with contextlib.suppress(Exception):
            kill_own()
        time.sleep(REAP_EVERY_S)


def kill_own() -> int:
    """SIGKILL every sandbox this process owns; return how many things were hit.

    Descendant processes (bwrap and whatever runs under it, a local Ray node's workers),
    this process's cgroups (``cgroup.kill``, so a forking tree cannot outrun it), and
    the containers labelled with this process as owner (only when this process used the
    docker backend). Never raises for one item.
    """
    hit = 0
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.send_signal(signal.SIGKILL)
                hit += 1
    me = current_owner()
    hit += len(cgroups.reclaim_stale(lambda o: o != me and owner_alive(o)))
    if _ran_containers():
        hit += _kill_own_containers(me)
    return hit


def _ran_containers() -> bool:
    """Whether this process created a container (docker is never imported for the answer)."""
    ran = getattr(sys.modules.get("grader.backends.docker.cleanup"), "ran_containers", None)
    return bool(ran is not None and ran())  # absent, or still importing in another thread


def _kill_own_containers(me: str) -> int:
    from grader.backends.docker.config import LABEL, LABEL_OWNER
    from grader.backends.docker.prereqs import client

    hit = 0
    with contextlib.suppress(Exception):
        flt = {"label": [f"{LABEL}=1", f"{LABEL_OWNER}={me}"], "status": "running"}
        for c in client().containers.list(filters=flt, ignore_removed=True):
            with contextlib.suppress(Exception):
                c.kill()
                hit += 1
    return hit


def reclaim_own(temp_dir: Path | None = None) -> int:
    """Remove what is still marked with this process as owner; return how many items.

    For the moment before exit, after :func:`kill_own`: folders this process marked (in
    the temp dir or elsewhere) unless kept on purpose, its cgroups, its containers.
    """
    me = current_owner()
    base = Path(temp_dir or temp_base())
    paths = set(marked_here())
    with contextlib.suppress(OSError):
        paths |= {p for p in base.iterdir() if p.name.startswith(FOLDER_PREFIXES)}
    removed = 0
    for path in sorted(paths):
        try:
            st = path.lstat()
        except OSError:
            continue
        if not path.is_dir() or path.is_symlink() or st.st_uid != os.geteuid():
            continue
        marker = read_marker(path)
        if marker is None and path not in marked_here():
            continue  # not ours, or ours cut short before its marker: the sweep's case
        if marker is not None and (marker.get("owner") != me or marker.get("keep") is True):
            continue
        with contextlib.suppress(OSError):
            shutil.rmtree(path)
            removed += 1
    removed += len(cgroups.reclaim_stale(lambda o: o != me and owner_alive(o)))
    if _ran_containers():
        removed += _remove_own_containers(me)
    log.info("stop.reclaimed", items=removed)
    return removed


def _remove_own_containers(me: str) -> int:
    from grader.backends.docker.cleanup import remove
    from grader.backends.docker.config import LABEL, LABEL_OWNER
    from grader.backends.docker.prereqs import client

    n = 0
    with contextlib.suppress(Exception):
        flt = {"label": [f"{LABEL}=1", f"{LABEL_OWNER}={me}"]}
        for c in client().containers.list(all=True, filters=flt, ignore_removed=True):
            n += int(remove(c))
    return n
