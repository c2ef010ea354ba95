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
import threading
import time
from pathlib import Path

import psutil

from grader.backends.cleanup import (
    FOLDER_PREFIXES,
    current_owner,
    marked_here,
    read_marker,
    temp_base,
)
from grader.backends.registry import loaded_backends
from grader.errors import InfrastructureError
from grader.logs import get_logger

log = get_logger("kgrader.stop")
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
    then each backend's own (:meth:`~grader.backends.base.SandboxBackend.kill_own`: its
    cgroups, its containers), asked only of the backends loaded in this process: one never
    imported here started no sandbox here, and the signal path imports nothing. Never
    raises for one item.
    """
    hit = 0
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.send_signal(signal.SIGKILL)
                hit += 1
    me = current_owner()
    for backend in loaded_backends():
        with contextlib.suppress(Exception):
            hit += backend.kill_own(me)
    return hit


def reclaim_own(temp_dir: Path | None = None) -> int:
    """Remove what is still marked with this process as owner; return how many items.

    For the moment before exit, after :func:`kill_own`: folders this process marked (in
    the temp dir or elsewhere) unless kept on purpose, then each loaded backend's own
    (:meth:`~grader.backends.base.SandboxBackend.remove_own`).
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
    for backend in loaded_backends():
        with contextlib.suppress(Exception):
            removed += backend.remove_own(me)
    log.info("stop.reclaimed", items=removed)
    return removed
