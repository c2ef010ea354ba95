"""Choosing a backend and a device when the caller says ``auto``."""

from __future__ import annotations

import glob
import os

from grader.backends.base import Device, SandboxBackend
from grader.backends.registry import AUTO, DEFAULT, backend_class, backend_names
from grader.errors import SandboxUnavailableError
from grader.logs import step

# ``auto`` is the embedded default (README, the registry's DEFAULT): bubblewrap wherever
# it works; another backend only when named or when the default is unavailable here. An
# image that happens to exist does not switch a run to another sandbox without a word.
DEFAULT_BACKEND = DEFAULT


def detect_device() -> Device:
    """``cuda`` when an NVIDIA GPU node exists, ``rocm`` for /dev/kfd, else ``cpu``."""
    if os.environ.get("KGRADER_DEVICE") in ("cpu", "cuda", "rocm"):
        return os.environ["KGRADER_DEVICE"]  # type: ignore[return-value]
    if glob.glob("/dev/nvidia[0-9]*"):
        return "cuda"
    if os.path.exists("/dev/kfd"):
        return "rocm"
    return "cpu"


def auto_candidates() -> tuple[str, ...]:
    """The backends ``auto`` tries, in order: bubblewrap, then every other one."""
    names = backend_names()
    return (DEFAULT_BACKEND, *(n for n in names if n != DEFAULT_BACKEND)) \
        if DEFAULT_BACKEND in names else names


def select_backend(name: str, device: Device) -> SandboxBackend:
    """A ready backend: the one named (from the registry), or for ``auto`` the first of
    :func:`auto_candidates` usable here (bwrap when it works, else docker when its daemon
    and image are ready). The choice is a ``sandbox`` step (:func:`grader.logs.step`) and
    the report's ``sandbox.backend``.

    Raises :class:`grader.errors.UsageError` for an unknown name and
    :class:`SandboxUnavailableError` when none is usable (naming every backend's reason).
    """
    if name != AUTO:
        backend = backend_class(name)()
        backend.check_available(device)
        step("sandbox", backend=backend.name, device=device)
        return backend
    reasons: list[tuple[str, SandboxUnavailableError]] = []
    for candidate in auto_candidates():
        try:
            backend = backend_class(candidate)()
            backend.check_available(device)
        except SandboxUnavailableError as exc:
            reasons.append((candidate, exc))
            continue
        passed = ", ".join(f"{n} ({e.message})" for n, e in reasons)
        step("sandbox", backend=backend.name, device=device, chosen="auto",
             passed_over=passed or None)
        return backend
    assert reasons  # auto_candidates() is never empty
    if len(reasons) == 1:
        raise reasons[0][1]
    first = reasons[0][1]  # the default's reason leads: it is the one to fix
    raise SandboxUnavailableError(
        "no sandbox backend is usable here: "
        + "; ".join(f"{n}: {e.message}" for n, e in reasons),
        code=first.code, hint=first.hint)
