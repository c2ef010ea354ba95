"""The shipped conformance suite (:mod:`grader.backends.conformance.selfcheck`) passes for
every registered backend, the test-only ``testbox`` included (added by one registry line,
``tests/backends/__init__.py``)."""

from __future__ import annotations

import os

import pytest

import tests.backends  # noqa: F401  (registers the test-only backend)
from grader.backends.conformance.selfcheck import self_check
from grader.backends.registry import backend_class, backend_names
from grader.errors import SandboxUnavailableError


@pytest.mark.parametrize("name", backend_names())
def test_every_registered_backend_passes_the_shipped_self_check(name: str) -> None:
    try:
        failures = self_check(name)
    except SandboxUnavailableError as exc:
        if name != "testbox" and (os.environ.get("CI") or os.environ.get("KGRADER_REQUIRE_DOCKER")):
            pytest.fail(f"{name} backend unavailable: {exc}")
        pytest.skip(f"{name} backend unavailable: {exc}")
    assert failures == [], failures


def test_the_test_backend_runs_as_itself_and_owns_its_lifecycle() -> None:
    cls = backend_class("testbox")
    assert cls.name == "testbox" and not cls.capabilities.warm_start
    from tests.backends.testbox.backend import RUNS

    before = len(RUNS)
    assert self_check("testbox") == []
    assert len(RUNS) > before, "the self-check did not run the testbox backend's own run()"


def test_the_self_check_fails_a_backend_that_does_not_isolate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite is not vacuous: a backend whose sandbox keeps the host's network fails it."""
    from grader.backends.bwrap.hoststeps import HostSteps

    monkeypatch.setattr(HostSteps, "_network", lambda self: None)  # no network namespace
    failures = self_check("testbox")
    assert any(f.startswith("isolation") and "network" in f for f in failures), failures
