"""The registry of sandbox backends: a name -> class table filled by a decorator.

A backend module registers its class with ``@sandbox_backend("name")``. The built-in
backends are known by name before they are imported (so the CLI can list ``--backend``
choices without importing the docker SDK); :func:`backend_class` imports the module on
first use. ``auto`` is not a backend: :func:`grader.backends.select.select_backend`
resolves it by trying the backends in :func:`auto_order`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from grader.errors import SandboxUnavailableError, UsageError

if TYPE_CHECKING:
    from grader.backends.base import SandboxBackend

B = TypeVar("B", bound="type[SandboxBackend]")

# Name -> module that registers it on import. The order is the order `auto` tries them in:
# docker (production) when its daemon and image are ready, else the embedded bwrap.
_BUILTIN: dict[str, str] = {
    "docker": "grader.backends.docker.backend",
    "bwrap": "grader.backends.bwrap.backend",
}
_REGISTRY: dict[str, type[SandboxBackend]] = {}
AUTO = "auto"


def sandbox_backend(name: str) -> Callable[[B], B]:
    """Class decorator: register a :class:`SandboxBackend` subclass under ``name``."""
    if not name or name == AUTO or not name.replace("-", "").isalnum():
        raise ValueError(f"invalid backend name {name!r}")

    def register(cls: B) -> B:
        existing = _REGISTRY.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(f"backend {name!r} is already registered by {existing.__qualname__}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return register


def backend_names() -> tuple[str, ...]:
    """Every backend name, built-in first (in ``auto`` order), then any registered later."""
    extra = sorted(n for n in _REGISTRY if n not in _BUILTIN)
    return (*_BUILTIN, *extra)


def backend_choices() -> tuple[str, ...]:
    """What ``--backend`` accepts: ``auto`` and every backend name."""
    return (AUTO, *backend_names())


def backend_class(name: str) -> type[SandboxBackend]:
    """The class registered as ``name``; imports a built-in backend on first use.

    Raises :class:`UsageError` for an unknown name and :class:`SandboxUnavailableError`
    when the backend's module cannot be imported here (e.g. the docker SDK is missing).
    """
    if name not in _REGISTRY and name in _BUILTIN:
        try:
            importlib.import_module(_BUILTIN[name])
        except ImportError as exc:
            raise SandboxUnavailableError(
                f"the {name} backend cannot be imported: {exc}",
                hint="install kgrader with its dependencies (pip install -e .)",
            ) from exc
    cls = _REGISTRY.get(name)
    if cls is None:
        raise UsageError(
            f"unknown backend {name!r} ({', '.join(backend_choices())})", code="bad_backend"
        )
    return cls


def auto_order() -> tuple[str, ...]:
    """The backends ``auto`` tries, most preferred first."""
    return backend_names()
