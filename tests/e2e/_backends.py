"""Which sandbox backends an e2e test may use here."""

from __future__ import annotations

import os
import shutil

import pytest


def backend_or_skip(name: str) -> str:
    """bwrap where installed; docker where a daemon and the image answer. CI (or
    KGRADER_REQUIRE_DOCKER) requires docker: there a missing daemon fails the test."""
    if name == "bwrap":
        if shutil.which("bwrap") is None:
            pytest.skip("bubblewrap is not installed")
        return name
    from grader.backends.select import select_backend
    from grader.errors import SandboxUnavailableError

    try:
        select_backend("docker", "cpu")
    except SandboxUnavailableError as e:
        if os.environ.get("CI") or os.environ.get("KGRADER_REQUIRE_DOCKER"):
            pytest.fail(f"docker backend unavailable: {e}")
        pytest.skip(f"docker backend unavailable: {e}")
    return name
