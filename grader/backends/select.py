"""Choosing a backend and a device when the caller says ``auto``."""

from __future__ import annotations

import glob
import os

from grader.backends.base import Device, SandboxBackend
from grader.errors import SandboxUnavailableError, UsageError


def detect_device() -> Device:
    """``cuda`` when an NVIDIA GPU node exists, ``rocm`` for /dev/kfd, else ``cpu``."""
    if os.environ.get("KGRADER_DEVICE") in ("cpu", "cuda", "rocm"):
        return os.environ["KGRADER_DEVICE"]  # type: ignore[return-value]
    if glob.glob("/dev/nvidia[0-9]*"):
        return "cuda"
    if os.path.exists("/dev/kfd"):
        return "rocm"
    return "cpu"


def select_backend(name: str, device: Device) -> SandboxBackend:
    """``bwrap`` / ``docker`` by name; ``auto``: docker when its daemon and image are ready,
    else the embedded bwrap default."""
    from grader.backends.bwrap import BwrapBackend

    if name == "bwrap":
        b: SandboxBackend = BwrapBackend()
        b.check_available(device)
        return b
    if name == "docker":
        from grader.backends.docker import DockerBackend

        d = DockerBackend()
        d.check_available(device)
        return d
    if name != "auto":
        raise UsageError(f"unknown backend {name!r} (auto, bwrap, docker)")
    try:
        from grader.backends.docker import DockerBackend

        d = DockerBackend()
        d.check_available(device)
        return d
    except (SandboxUnavailableError, ImportError):
        pass
    b = BwrapBackend()
    b.check_available(device)
    return b
