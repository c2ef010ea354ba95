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
from .standin_launch import StandinLaunch, using_real_launcher


@pytest.fixture(scope="session", autouse=True)
def _judge_under_a_launcher() -> Iterator[None]:
    """Every evaluation starts its judge through a launcher, as in production.

    The backends run ``SandboxSpec.argv`` unchanged as uid 0 with the launch capabilities;
    until ``sandbox/launcher/launch.py`` exists (and the pipeline passes it), the judge's argv is
    wrapped in the test stand-in (:mod:`.standin_launch`) so the judge runs as uid 65534.
    """
    import grader.evaluate as evaluate_module

    if using_real_launcher():
        yield
        return
    real = evaluate_module.select_backend
    mp = pytest.MonkeyPatch()
    mp.setattr(evaluate_module, "select_backend",
               lambda name, device: StandinLaunch(real(name, device)))
    yield
    mp.undo()


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
