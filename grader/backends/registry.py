"""The registry of sandbox backends: a name -> class table filled by a decorator.

The only module that names the backends. A backend module registers its class with
``@sandbox_backend("name")``. Every backend is known by name before it is imported (so
the CLI can list ``--backend`` choices without importing the docker SDK):

* the built-in ones, in :data:`_BUILTIN`;
* one more backend is one line: :func:`register_backend` ``("name", "package.module")``
  (a test's, or a plug-in package's on import), or, for the CLI and other processes that
  never import the plug-in, one entry ``name=package.module`` of :data:`ENV`
  (comma-separated). Installed entry points are not scanned: that would cost every CLI
  start ~20 ms.

:func:`backend_class` imports the module on first use. Everything a backend does lives on
its class (:class:`grader.backends.base.SandboxBackend`); the generic layer (stop,
cleanup, the peaks cache, the pool, the report) iterates :func:`backend_names` or
:func:`loaded_backends`. ``auto`` is not a backend:
:func:`grader.backends.select.select_backend` resolves it by trying the backends in
:func:`auto_order`.
"""

from __future__ import annotations

import importlib
import os
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
# The backend auto picks first: the embedded one, wherever it works (README).
DEFAULT = "bwrap"
ENV = "KGRADER_BACKENDS"
_ADDED: dict[str, str] = {}  # register_backend() and $KGRADER_BACKENDS: name -> module
_REGISTRY: dict[str, type[SandboxBackend]] = {}
AUTO = "auto"


def _valid(name: str) -> bool:
    return bool(name) and name != AUTO and name.replace("-", "").isalnum()


def register_backend(name: str, module: str) -> None:
    """Make backend ``name`` known; ``module`` registers its class on import (lazily, on
    first use). The one line that adds a backend outside this package."""
    if not _valid(name):
        raise ValueError(f"invalid backend name {name!r}")
    known = _BUILTIN.get(name) or _ADDED.get(name)
    if known is not None and known != module:
        raise ValueError(f"backend {name!r} is already registered by {known}")
    _ADDED[name] = module


def _modules() -> dict[str, str]:
    """Every known backend's module: built-in, registered, and named in :data:`ENV`."""
    from_env = {}
    for entry in os.environ.get(ENV, "").split(","):
        name, _, module = entry.strip().partition("=")
        if _valid(name) and module and name not in _BUILTIN:
            from_env[name] = module.strip()
    return {**from_env, **_ADDED, **_BUILTIN}


def sandbox_backend(name: str) -> Callable[[B], B]:
    """Class decorator: register a :class:`SandboxBackend` subclass under ``name``."""
    if not _valid(name):
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
    extra = sorted({*_modules(), *_REGISTRY} - set(_BUILTIN))
    return (*_BUILTIN, *extra)


def backend_choices() -> tuple[str, ...]:
    """What ``--backend`` accepts: ``auto`` and every backend name."""
    return (AUTO, *backend_names())


def sorted_choices() -> tuple[str, ...]:
    """``auto``, then every backend name alphabetically (the order some options and
    messages have always listed them in)."""
    return (AUTO, *sorted(backend_names()))


def loaded_backends() -> tuple[type[SandboxBackend], ...]:
    """The backend classes imported in this process so far (nothing is imported): the
    signal path asks only these, since a backend never loaded here started no sandbox."""
    return tuple(_REGISTRY.values())


def backend_classes() -> tuple[type[SandboxBackend], ...]:
    """Every backend class that can be imported here (a missing SDK's is left out)."""
    out = []
    for name in backend_names():
        try:
            out.append(backend_class(name))
        except SandboxUnavailableError:
            continue
    return tuple(out)


def backend_class(name: str) -> type[SandboxBackend]:
    """The class registered as ``name``; imports a built-in backend on first use.

    Raises :class:`UsageError` for an unknown name and :class:`SandboxUnavailableError`
    when the backend's module cannot be imported here (e.g. the docker SDK is missing).
    """
    module = _modules().get(name)
    if name not in _REGISTRY and module is not None:
        try:
            importlib.import_module(module)
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
