"""Choosing a backend and a device when the caller says ``auto``."""

from __future__ import annotations

import glob
import os

from grader.backends.base import Device, SandboxBackend
from grader.backends.registry import AUTO, auto_order, backend_class
from grader.errors import SandboxUnavailableError


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
    """A ready backend: the one named (from the registry), or for ``auto`` the first of
    :func:`grader.backends.registry.auto_order` that is usable here (docker when its
    daemon and image are ready, else the embedded bwrap default).

    Raises :class:`grader.errors.UsageError` for an unknown name and
    :class:`SandboxUnavailableError` (with the last backend's reason) when none is usable.
    """
    if name != AUTO:
        backend = backend_class(name)()
        backend.check_available(device)
        return backend
    last: SandboxUnavailableError | None = None
    for candidate in auto_order():
        try:
            backend = backend_class(candidate)()
            backend.check_available(device)
            return backend
        except SandboxUnavailableError as exc:
            last = exc
    assert last is not None  # auto_order() is never empty
    raise last
