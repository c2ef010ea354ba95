"""The agent tools end to end: real bubblewrap sandbox, CPU device, Triton interpreter.

Each evaluation takes ~6-15 s, so the tests share one workspace where they can and keep
to the behaviours that matter: verdicts, timing fields, best.py, the CLI and a real MCP
client talking to ``kgrader mcp`` over stdio.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from grader.agent import tools
from grader.agent.schemas import TOOL_NAMES
from grader.errors import SandboxUnavailableError
from grader.records import check_consistency, read_trajectory

from .conftest import AGENT_TRIES, agent_retries, kgrader, retried

pytestmark = pytest.mark.bwrap

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "examples" / "vector_add_small"
GOOD = (TASK / "candidates" / "good.py").read_text()
# Passes the static scan, fails on import in the sandbox (line 7: ZeroDivisionError).
BROKEN = GOOD.replace("BLOCK = 1024", "BLOCK = 1024 // 0", 1)
DENIED = (TASK / "candidates" / "broken.py").read_text()  # no @triton.jit: denied by the scan


@pytest.fixture(scope="module", autouse=True)
def _bwrap_and_private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    from grader.backends.bwrap import BwrapBackend

    try:
        BwrapBackend().check_available("cpu")
    except SandboxUnavailableError as e:
        if os.environ.get("CI"):
            pytest.fail(f"bwrap unavailable: {e}")
        pytest.skip(f"bwrap unavailable: {e}")
    old = os.environ.get("KGRADER_HARDWARE")
    os.environ["KGRADER_HARDWARE"] = str(tmp_path_factory.mktemp("hw") / "hardware.json")
    yield
    if old is None:
        os.environ.pop("KGRADER_HARDWARE", None)
    else:
        os.environ["KGRADER_HARDWARE"] = old


def _new_workspace(root: Path) -> tools.Workspace:
    return tools.init_workspace(root, TASK, backend="bwrap", device="cpu", quick_calibration=True)


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> tools.Workspace:
    return _new_workspace(tmp_path_factory.mktemp("ws"))


def _timed(call: Callable[[], dict[str, Any]], tries: int = AGENT_TRIES) -> dict[str, Any]:
    """Run a timing tool; retry, as an agent does, what the host's load spoiled.

    On a loaded 2-core CI host other processes steal the CPU between the timed region
    and the judge's clock: the judge says ``timing_unreliable`` or ``harness_timeout``
    (infrastructure, retried), or flags ``work_escaped_timing``. That says nothing about
    the tool plumbing under test here; each retry waits a little longer for the load.
    """
    return retried(call, lambda res: agent_retries(res["errors"]), tries=tries, wait_s=5)


def _logged_calls(ws: tools.Workspace) -> list[dict[str, Any]]:
    path = ws.root / "records" / "tool-calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return kgrader(*args, timeout=300)


def test_compile_kernel_passes_good_and_names_the_stage_of_broken(ws: tools.Workspace) -> None:
    good = tools.compile_kernel(ws, GOOD)
    assert good["ok"] and good["compiled"] and good["stage"] == "compile", good
    bad = tools.compile_kernel(ws, BROKEN)
    assert not bad["ok"] and not bad["compiled"]
    assert bad["errors"][0]["stage"] == "compile"
    assert "ZeroDivisionError" in bad["errors"][0]["message"]
    denied = tools.compile_kernel(ws, DENIED)
    assert not denied["ok"] and denied["stage"] == "scan"
    assert denied["errors"][0]["code"] == "require-triton-kernel"
    calls = _logged_calls(ws)[-3:]
    assert [c["name"] for c in calls] == ["compile_kernel"] * 3
    assert calls[1]["args"] == {"source": BROKEN} and calls[1]["result"] == bad


def test_bench_kernel_rechecks_correctness_and_returns_timing(ws: tools.Workspace) -> None:
    res = _timed(lambda: tools.bench_kernel(ws, GOOD))
    assert res["ok"] and res["correct"] and res["stage"] == "benchmark", res
    for key in ("median_ms", "bandwidth_gbps", "tflops"):
        assert isinstance(res[key], float) and res[key] > 0, key
    assert res["median_ms"] == float(f"{res['median_ms']:.3g}")  # measured after hidden calls
    for key in ("mean_ms", "p95_ms", "std_ms", "min_ms", "cv"):  # withheld, with the reason
        assert res[key] is None and "hidden shapes" in res["unmeasured"][key], key
    assert res["correctness"]["checks"] > 0
    json.dumps(res)  # plain JSON


def test_accept_on_a_fresh_workspace_makes_best_py(tmp_path: Path) -> None:
    fresh = _new_workspace(tmp_path / "ws")
    res = _timed(lambda: tools.accept_candidate(fresh, GOOD))
    assert res["ok"] and res["accepted"] and res["baseline"] == "none", res
    assert res["improvementFraction"] is None and "no best.py" in res["unmeasured"]["improvementFraction"]
    records = fresh.root / "records"
    assert (records / "best.py").read_text() == GOOD
    line = read_trajectory(records)[-1]  # earlier lines: rejections by a loaded host, if any
    assert line.accepted and (records / line.folder / "report.json").is_file()
    assert check_consistency(records) == []


def test_cli_tool_prints_the_json_return_and_exits_by_ok(ws: tools.Workspace) -> None:
    proc = _cli("tool", "compile_kernel", "--workspace", str(ws.root),
                "--args", json.dumps({"source": BROKEN}))
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    assert out["tool"] == "compile_kernel" and out["errors"][0]["stage"] == "compile"
    bad = _cli("tool", "compile_kernel", "--workspace", str(ws.root), "--args", "{oops")
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and bad.stdout == ""
    unknown = _cli("tool", "rm_rf", "--workspace", str(ws.root), "--args", "{}")
    assert unknown.returncode == 2 and "unknown tool" in unknown.stderr


def test_mcp_server_answers_a_real_client(ws: tools.Workspace) -> None:
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "grader.cli", "mcp", "--workspace", str(ws.root)],
        env={"KGRADER_HARDWARE": os.environ["KGRADER_HARDWARE"], "PATH": os.environ["PATH"]},
        cwd=str(REPO))

    async def session() -> tuple[list[str], Any]:
        async with Client(params, read_timeout_seconds=300) as client:
            listed = await client.list_tools()
            result = await client.call_tool("compile_kernel", {"source": GOOD})
            return [t.name for t in listed.tools], result

    names, result = anyio.run(session)
    assert sorted(names) == sorted(TOOL_NAMES)
    assert not result.is_error
    payload = result.structured_content
    assert payload is not None and payload["ok"] and payload["compiled"], payload
    assert json.loads(result.content[0].text)["tool"] == "compile_kernel"
    assert _logged_calls(ws)[-1]["name"] == "compile_kernel"
