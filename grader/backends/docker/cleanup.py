"""Removing containers: after each run, at exit, on SIGTERM, and orphans of dead owners.

Every kgrader container carries ``kgrader=1`` and ``kgrader.owner=host:pid:start`` (see
:mod:`grader.backends.cleanup`). A run removes its container in ``finally``; an
``atexit`` hook removes those of runs that never got there; under the CLI a stop signal
kills this process's containers (:mod:`grader.backends.stop`), elsewhere ``SIGTERM``
becomes ``SystemExit`` during a run so ``finally`` runs. Only ``SIGKILL`` of the host
process leaves containers behind: :func:`reclaim_containers` removes those whose owner is
gone (the next kgrader command's sweep, or ``kgrader sandbox cleanup``).
"""

from __future__ import annotations

import atexit
import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container

from grader.backends.docker.config import LABEL, LABEL_OWNER, LABEL_RUN
from grader.backends.docker.prereqs import client
from grader.backends.owner import owner_alive, owner_gone
from grader.logs import get_logger

log = get_logger("kgrader.docker")
_live: set[str] = set()
_live_lock = threading.RLock()  # re-entrant: a signal handler may run while it is held
_ran = threading.Event()


def track(container: Container) -> None:
    """Remember a container of a run in progress (for the atexit backstop)."""
    with _live_lock:
        _live.add(str(container.id))
        _ran.set()


def ran_containers() -> bool:
    """Whether this process created a container (so a stop must look for its own)."""
    return _ran.is_set()


def remove(container: Container) -> bool:
    """Force-remove ``container`` (and its anonymous volumes); whether it was removed."""
    try:
        container.remove(force=True, v=True)
        removed = True
    except docker.errors.NotFound:
        removed = False
    except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
        # A daemon that went away (or refused): the container stays, labelled with its
        # owner, for the next kgrader process's sweep once this one is gone.
        log.warning("docker.remove_failed", id=container.short_id, error=str(exc))
        removed = False
    with _live_lock:
        _live.discard(str(container.id))
    return removed


def _remove_live_containers() -> None:
    """atexit backstop: remove containers of runs that never reached their ``finally``."""
    with _live_lock:
        ids = list(_live)
    if not ids:
        return
    with contextlib.suppress(Exception):
        c = client()
        for cid in ids:
            with contextlib.suppress(docker.errors.DockerException):
                c.api.remove_container(cid, force=True)


atexit.register(_remove_live_containers)


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into ``SystemExit(143)`` for the run, so ``finally`` removes the container.

    Only when we are the main thread and nobody else handles SIGTERM already.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def reclaim_containers(
    client: docker.DockerClient, *, include_live: bool = False, gone_only: bool = False,
    label: str | None = None,
) -> tuple[list[str], list[str]]:
    """``(removed, kept)`` container names among those labelled ``kgrader=1``.

    A container whose owner still runs on this host belongs to an evaluation in progress
    and is kept unless ``include_live``. Running orphans are killed and removed too.
    ``gone_only`` (the automatic sweep): remove only containers whose owner is provably
    gone from this host (:func:`~grader.backends.owner.owner_gone`); another host's
    container on a shared daemon stays. ``label``: only the containers of runs with that
    :attr:`~grader.backends.base.SandboxSpec.label`.
    """
    removed: list[str] = []
    kept: list[str] = []
    # A container removed between the daemon's list and its inspect (its own run ending, a
    # neighbour's sweep) is no longer there to reclaim; it must not end the sweep.
    wanted = [f"{LABEL}=1"] + ([f"{LABEL_RUN}={label}"] if label is not None else [])
    listed = client.containers.list(all=True, filters={"label": wanted}, ignore_removed=True)
    for container in listed:
        owner = container.labels.get(LABEL_OWNER)
        if (gone_only and not owner_gone(owner)) or (not include_live and owner_alive(owner)):
            kept.append(str(container.name))
        elif remove(container):
            removed.append(str(container.name))
    log.info("docker.cleanup", removed=len(removed), kept_live=len(kept))
    return removed, kept
