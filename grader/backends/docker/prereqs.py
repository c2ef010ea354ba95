"""The one docker client, and an image's id.

:func:`client` is the only place kgrader builds a docker client: the backend, image
builds, cleanup and the hardware fingerprint all get theirs here, with the same error
(:class:`SandboxUnavailableError`, with a hint that says how to start dockerd). A leaf: it
imports nothing of the docker backend (the image and plumbing checks that name images are
the backend's, :func:`grader.backends.docker.backend.check_available`).
"""

from __future__ import annotations

import os
import threading

import docker
import docker.errors

from grader.errors import SandboxUnavailableError

START_HINT = (
    "start it as root with scripts/docker-setup.sh, or "
    "`dockerd --bridge=none --iptables=false &` (or `systemctl start docker`)"
)
_lock = threading.Lock()
_clients: dict[int, docker.DockerClient] = {}


def client() -> docker.DockerClient:
    """A docker client that answered a ping (one per process, reused).

    Raises :class:`SandboxUnavailableError` when dockerd cannot be reached.
    """
    pid = os.getpid()  # a forked child must not share the parent's connection pool
    with _lock:
        cached = _clients.get(pid)
        if cached is not None:
            return cached
        try:
            made = docker.from_env()
            made.ping()
        except docker.errors.DockerException as exc:
            raise SandboxUnavailableError(f"cannot reach dockerd: {exc}", hint=START_HINT) from exc
        _clients[pid] = made
        return made


def image_id(image: str) -> str:
    """The local id of ``image`` (for fingerprints); :class:`SandboxUnavailableError` if absent."""
    try:
        return str(client().images.get(image).id)
    except docker.errors.DockerException as exc:
        raise SandboxUnavailableError(f"cannot fingerprint docker image {image}: {exc}") from None
