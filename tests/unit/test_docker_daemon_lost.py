"""A docker daemon that goes away mid-run (restarted, killed) is a typed infrastructure
error, sandbox_unavailable, never an internal error: the docker SDK raises requests'
ConnectionError then, not a docker.errors type. The container, which cannot be removed
while the daemon is gone, is left to the owner sweep."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests.exceptions

from grader.backends.base import SandboxSpec
from grader.backends.docker import backend as be
from grader.backends.docker import cleanup, prereqs
from grader.errors import SandboxUnavailableError
from grader.limits import Limits

GONE = requests.exceptions.ConnectionError(("Connection aborted.", FileNotFoundError(2, "gone")))


class _Container:
    id = short_id = "c0ffee"

    def __init__(self) -> None:
        self.removes = 0

    def remove(self, **kw: Any) -> None:
        self.removes += 1
        raise GONE


def test_a_daemon_lost_while_the_container_runs_is_sandbox_unavailable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = _Container()
    client = SimpleNamespace(containers=SimpleNamespace(create=lambda **kw: made))
    monkeypatch.setattr(prereqs, "client", lambda: client)
    monkeypatch.setattr(be, "require_image", lambda c, image, device: image)

    def supervise(*a: Any, **kw: Any) -> Any:
        raise GONE

    monkeypatch.setattr(be, "supervise", supervise)
    spec = SandboxSpec(in_dir=tmp_path / "in", out_dir=tmp_path / "out",
                       argv=("python3", "-m", "sandbox.judge.main"), limits=Limits(), label="t")
    (tmp_path / "in").mkdir()
    with pytest.raises(SandboxUnavailableError, match="lost dockerd") as info:
        be.DockerBackend(image="kgrader/cpu:latest").run(spec)
    assert info.value.code == "sandbox_unavailable"
    assert made.removes == 1  # tried, and the failure to remove did not replace the error


def test_removing_a_container_without_a_daemon_reports_not_removed() -> None:
    c: Any = _Container()
    assert cleanup.remove(c) is False
