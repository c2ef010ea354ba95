"""The agent tools against a real ``kgrader serve`` (grader/agent/remote.py): a workspace
that names a server grades there, with the submitter's token from $KGRADER_TOKEN."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.agent.tools import bench_kernel, compile_kernel, init_workspace, measure_peak
from tests.e2e.test_service_e2e import TASK, Server

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def test_bench_and_compile_run_on_the_server_and_device_tools_are_refused(
        server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = init_workspace(tmp_path / "ws", TASK, backend="bwrap", device="cpu", server=server.url)
    monkeypatch.delenv("KGRADER_TOKEN", raising=False)
    no_token = bench_kernel(ws, (TASK / "candidates" / "good.py").read_text())
    assert not no_token["ok"] and "KGRADER_TOKEN" in no_token["errors"][0]["message"]

    monkeypatch.setenv("KGRADER_TOKEN", server.token("agent"))
    bench = bench_kernel(ws, (TASK / "candidates" / "good.py").read_text())
    assert bench["ok"], bench["errors"]
    assert bench["median_ms"] is not None and bench["median_ms"] > 0
    assert "speedup_vs_reference" in bench  # paired with the task's reference there

    broken = compile_kernel(ws, (TASK / "candidates" / "broken.py").read_text())
    assert not broken["ok"] and broken["compiled"] is False
    assert broken["errors"][0]["stage"] in ("scan", "compile")

    peak = measure_peak(ws)
    assert not peak["ok"] and "measures this machine's device" in peak["errors"][0]["message"]
    assert not (tmp_path / "ws" / "kgrader.json").read_text().count("kgt_")  # no token stored
