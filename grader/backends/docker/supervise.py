"""Supervising one container: drain its output, watch its pids, wait, kill, read its end.

stdout and stderr come from two attach streams opened before the container starts (the
log driver is off, so nothing reaches the host's disk) and are drained to the end with a
cap (:mod:`grader.backends.output`). A watcher samples the container's ``pids.events`` and
kills the container at the first refused fork: a fork bomb otherwise spins against the
pids limit until the wall limit. On the wall limit the host kills the whole container
(``docker kill``), never one process.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container

from grader.backends.cancel import watch
from grader.backends.classify import Evidence, decode_status
from grader.backends.output import OutputDrain
from grader.errors import SandboxUnavailableError
from grader.logs import get_logger

log = get_logger("kgrader.docker")
PIDS_POLL_S = 0.1
_STREAM_ERRORS = (OSError, ValueError, requests.exceptions.RequestException)


class PidsWatcher(threading.Thread):
    """Samples the container's ``pids.events``; kills the container at the first hit.

    The cgroup disappears when the container exits, so it is sampled live.
    """

    def __init__(self, container: Container, cgroup_file: Path | None) -> None:
        super().__init__(daemon=True, name="kgrader-docker-pids")
        self.container = container
        self.cgroup_file = cgroup_file
        self.stop = threading.Event()
        self.hit = False

    def run(self) -> None:
        if self.cgroup_file is None:
            return
        while not self.stop.wait(PIDS_POLL_S):
            try:
                text = self.cgroup_file.read_text()
            except OSError:
                continue
            if any(line.split()[1] != "0" for line in text.splitlines() if line.strip()):
                self.hit = True
                with contextlib.suppress(docker.errors.DockerException):
                    self.container.kill()
                return


def pids_events_file(container_id: str) -> Path | None:
    """The host path of the container's ``pids.events`` (cgroup v1/v2, cgroupfs/systemd)."""
    root = Path("/sys/fs/cgroup")
    for rel in (
        f"pids/docker/{container_id}",
        f"pids/system.slice/docker-{container_id}.scope",
        f"docker/{container_id}",
        f"system.slice/docker-{container_id}.scope",
    ):
        candidate = root / rel / "pids.events"
        if candidate.is_file():
            return candidate
    return None


@dataclass
class Watched:
    """What the host saw of one container run."""

    stdout: OutputDrain
    stderr: OutputDrain
    status: int | None
    wall_s: float
    evidence: Evidence
    pids_visible: bool


def _stream(client: docker.DockerClient, container: Container, stdout: bool) -> Iterator[bytes]:
    chunks: Iterator[bytes] = client.api.attach(
        container.id, stdout=stdout, stderr=not stdout, stream=True, logs=False
    )
    return chunks


def _tether(client: docker.DockerClient, container: Container) -> Any:
    """The container's stdin, attached before it starts and held until it ends: when this
    process dies the kernel closes the socket, the daemon closes the container's stdin
    (``stdin_once``) and the judge ends the container (``sandbox.judge.main.tether``).
    Without it (an attach refused) a SIGKILLed host's container runs on until its judge
    ends or the next sweep: logged, not fatal."""
    try:
        return client.api.attach_socket(container.id, params={"stdin": 1, "stream": 1})
    except (docker.errors.DockerException, *_STREAM_ERRORS) as e:
        log.warning("docker.tether_unavailable", id=container.short_id, error=str(e)[:200])
        return None


def supervise(client: docker.DockerClient, container: Container, wall_s: float,
              cap: int, cancel: threading.Event | None = None) -> Watched:
    """Start ``container`` and watch it until it ends or the host kills it."""
    drains = []
    for out in (True, False):
        stream: Any = _stream(client, container, out)
        drains.append(OutputDrain(stream, cap, name="kgrader-docker-output",
                                  errors=_STREAM_ERRORS, close=getattr(stream, "close", None)))
    for d in drains:
        d.start()
    tether = _tether(client, container)
    started = time.monotonic()
    container.start()
    watcher = PidsWatcher(container, pids_events_file(str(container.id)))
    watcher.start()
    timed_out = False
    end_watch = watch(cancel, container.kill)  # a cancelled job's container (grader.service)
    try:
        status, timed_out = _wait(container, wall_s)
    finally:
        end_watch()
        wall = time.monotonic() - started
        watcher.stop.set()
        watcher.join(timeout=2)
        if tether is not None:
            with contextlib.suppress(*_STREAM_ERRORS):
                tether.close()
    for d in drains:
        d.join(timeout=10)
    container.reload()
    oom = bool(container.attrs.get("State", {}).get("OOMKilled", False))
    # dockerd sets State.OOMKilled from the container cgroup's OOM events: counted.
    evidence = Evidence(timed_out=timed_out, oom_killed=oom, pids_limited=watcher.hit,
                        signal=decode_status(status)[1], oom_counted=True)
    return Watched(drains[0], drains[1], status, round(wall, 3), evidence,
                   watcher.cgroup_file is not None)


def _wait(container: Container, wall_s: float) -> tuple[int | None, bool]:
    """``(status, timed_out)``: wait up to ``wall_s``, then kill the whole container."""
    started = time.monotonic()
    timed_out = False
    try:
        result = container.wait(timeout=wall_s)
    except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
        if time.monotonic() - started < wall_s - 1.0:
            raise SandboxUnavailableError(f"lost dockerd while waiting: {exc}") from exc
        # A read timeout on wait kills nothing: kill the whole container explicitly.
        timed_out = True
        log.info("docker.timeout", id=container.short_id, wall_s=wall_s)
        with contextlib.suppress(docker.errors.NotFound):
            container.kill()
        result = container.wait(timeout=30)
    code = result.get("StatusCode")
    return (int(code) if code is not None else None), timed_out
