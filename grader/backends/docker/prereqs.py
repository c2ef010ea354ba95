"""What the docker backend needs before it can run anything, and the one docker client.

:func:`client` is the only place kgrader builds a docker client: the backend, image
builds, cleanup and the hardware fingerprint all get theirs here, with the same error
(:class:`SandboxUnavailableError`, with a hint that says how to start dockerd).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import docker
import docker.errors

from grader.backends.base import Device
from grader.backends.docker.images import build_command, default_image
from grader.errors import ImageMissingError, SandboxUnavailableError

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


def require_image(c: docker.DockerClient, image: str, device: Device) -> str:
    """``image`` if it is present locally (kgrader never pulls), else :class:`ImageMissingError`."""
    try:
        c.images.get(image)
    except docker.errors.ImageNotFound as exc:
        raise ImageMissingError(
            f"docker image {image} is not present (kgrader never pulls)",
            hint=f"build it: {build_command(image, device)}",
        ) from exc
    except docker.errors.DockerException as exc:
        raise SandboxUnavailableError(f"dockerd failed: {exc}", hint=START_HINT) from exc
    return image


def image_id(image: str) -> str:
    """The local id of ``image`` (for fingerprints); :class:`SandboxUnavailableError` if absent."""
    try:
        return str(client().images.get(image).id)
    except docker.errors.DockerException as exc:
        raise SandboxUnavailableError(f"cannot fingerprint docker image {image}: {exc}") from None


def check_available(c: docker.DockerClient, image: str | None, device: Device,
                    harness_dir: Path) -> None:
    """Daemon reachable, image local, harness present, GPU plumbing where needed."""
    require_image(c, image or default_image(device), device)
    if not harness_dir.is_dir():
        raise SandboxUnavailableError(f"harness package not found at {harness_dir}")
    if device == "cuda":
        runtimes = c.info().get("Runtimes", {}) or {}
        if "nvidia" not in runtimes and not _which("nvidia-container-runtime-hook"):
            raise SandboxUnavailableError(
                "dockerd cannot expose NVIDIA GPUs",
                hint="install nvidia-container-toolkit and restart dockerd",
            )
    if device == "rocm" and not Path("/dev/kfd").exists():
        raise SandboxUnavailableError("no /dev/kfd: the ROCm kernel driver is not loaded")


def _which(name: str) -> bool:
    return any(
        os.access(os.path.join(d, name), os.X_OK) for d in os.environ.get("PATH", "").split(":")
    )
