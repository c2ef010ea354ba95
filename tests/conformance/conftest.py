"""Fixtures of the conformance suite: every test runs once per backend.

``backend`` is session-scoped so that pytest runs all bwrap tests, then all docker tests.
A backend that is not usable here skips its tests with the reason (docker: no daemon or no
``kgrader/cpu:latest`` image), unless ``CI`` or ``KGRADER_REQUIRE_DOCKER`` is set: then a
missing backend fails instead of hiding.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from grader.errors import SandboxUnavailableError

from ._support import BACKENDS, HERE, Host, Sentinel, backend_object


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    try:
        backend_object(name)
    except SandboxUnavailableError as exc:
        reason = f"{name} backend unavailable: {exc}"
        if name == "docker" and (os.environ.get("CI") or os.environ.get("KGRADER_REQUIRE_DOCKER")):
            pytest.fail(reason)
        pytest.skip(reason)
    except ImportError as exc:
        pytest.skip(f"{name} backend cannot be imported: {exc}")
    return name


@pytest.fixture(scope="session")
def sentinel() -> Iterator[Sentinel]:
    """A world-readable host file in a world-traversable directory (this folder)."""
    s = Sentinel.create(HERE)
    yield s
    s.path.unlink(missing_ok=True)


def _host(backend: str, sentinel: Sentinel, base: os.PathLike[str]) -> Host:
    work = os.path.join(base, f"kgc-{uuid.uuid4().hex[:16]}")
    os.makedirs(work)
    from pathlib import Path

    return Host(backend, sentinel, Path(work))


@pytest.fixture
def host(backend: str, sentinel: Sentinel, tmp_path: os.PathLike[str]) -> Host:
    """One test's host view; tests end with ``host.assert_unharmed()``."""
    return _host(backend, sentinel, tmp_path)


@pytest.fixture(scope="module")
def module_host(backend: str, sentinel: Sentinel, tmp_path_factory: pytest.TempPathFactory) -> Host:
    """Like ``host``, shared by the tests of one module that read one evaluation."""
    return _host(backend, sentinel, tmp_path_factory.mktemp("conformance"))
