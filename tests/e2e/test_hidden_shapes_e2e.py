"""Hidden shapes never leave: a candidate that raises with the shape it was called on,
graded for real (bubblewrap, CPU, Triton interpreter), through the agent tools, the
experience store and a leaderboard page. Every candidate-facing copy says "hidden shape
#k" and holds none of the hidden dimension values; the operator's report keeps them.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grader.agent import tools
from grader.errors import SandboxUnavailableError
from grader.leaderboard.job import classify
from grader.leaderboard.render import SHAPES_META, render_site, shape_meta
from grader.leaderboard.seeds import Secret, task_payload
from grader.leaderboard.state import EvalRow, State
from grader.records import read_trajectory
from grader.report.model import Report

pytestmark = pytest.mark.bwrap

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "examples" / "vector_add_small"  # hidden: 37x999, 1x1000, 67x1031
ATTACK = (REPO / "tests" / "attacks" / "runtime" / "raise_with_shapes.py").read_text()
# The hidden shapes as a candidate or the judge would write them; timestamps and figures
# never match these (999 and 1031 are no minute, no count of this task).
LEAK = re.compile(r"(?<![\w.])(999|1031)(?![\w.])|37,\s*999|67,\s*1031|1,\s*1000"
                  r"|['\"]?M['\"]?:\s*(37|67)(?!\d)")


def _leaks(text: str) -> list[str]:
    return [m.group() for m in LEAK.finditer(text)]


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One workspace: bench_kernel and accept_candidate on the attack (two evaluations)."""
    from grader.backends.bwrap import BwrapBackend

    try:
        BwrapBackend().check_available("cpu")
    except SandboxUnavailableError as e:
        if os.environ.get("CI"):
            pytest.fail(f"bwrap unavailable: {e}")
        pytest.skip(f"bwrap unavailable: {e}")
    root = tmp_path_factory.mktemp("hidden")
    saved = {k: os.environ.get(k) for k in ("KGRADER_EXPERIENCE", "KGRADER_HARDWARE")}
    os.environ["KGRADER_EXPERIENCE"] = str(root / "experience.sqlite")
    os.environ["KGRADER_HARDWARE"] = str(root / "hardware.json")
    try:
        ws = tools.init_workspace(root / "ws", TASK, backend="bwrap", device="cpu")
        bench = tools.bench_kernel(ws, ATTACK)
        accept = tools.accept_candidate(ws, ATTACK)
        line = read_trajectory(ws.root / "records")[-1]
        full = Report.model_validate_json((ws.root / "records" / line.folder / "report.json").read_text())
        yield {"ws": ws, "root": root, "bench": bench, "accept": accept, "full": full}
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_the_operator_report_keeps_the_hidden_shape_the_candidate_raised_with(graded: dict[str, Any]) -> None:
    full: Report = graded["full"]
    (err,) = full.errors
    assert (err.stage, err.code, err.origin) == ("correctness", "exception", "candidate")
    assert "saw torch.Size([37, 999])" in err.message
    assert err.detail["dims"] == {"M": 37, "N": 999} and err.detail["shape_kind"] == "hidden"


def test_bench_and_accept_results_say_hidden_shape_0_and_leak_no_dimension(graded: dict[str, Any]) -> None:
    for res in (graded["bench"], graded["accept"]):
        assert not res["ok"] and res["stage"] == "correctness", res
        (err,) = res["errors"]
        assert err["code"] == "exception" and "hidden shape #0" in err["message"], err
        assert err["detail"] == {"withheld": True, "hidden_shape": 0} and err["line"] is None
        assert _leaks(json.dumps(res)) == []
    log = (graded["ws"].root / "records" / "tool-calls.jsonl").read_text()
    assert _leaks(log) == []  # the tool-call log holds the results the agent got


def test_the_mcp_server_returns_the_same_redacted_result(graded: dict[str, Any]) -> None:
    import anyio
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "grader.cli", "mcp", "--workspace", str(graded["ws"].root)],
        env={k: os.environ[k] for k in ("KGRADER_HARDWARE", "KGRADER_EXPERIENCE", "PATH")},
        cwd=str(REPO))

    async def session() -> Any:
        async with Client(params, read_timeout_seconds=300) as client:
            return await client.call_tool("bench_kernel", {"source": ATTACK})

    result = anyio.run(session)
    payload = result.structured_content
    assert payload is not None and not payload["ok"], payload
    assert "hidden shape #0" in payload["errors"][0]["message"]
    assert _leaks(json.dumps(payload)) == [] and _leaks(result.content[0].text) == []


def test_search_experience_and_the_store_file_hold_no_hidden_dimension(graded: dict[str, Any]) -> None:
    found = tools.search_experience(graded["ws"], outcome="failed", limit=20)
    assert found["ok"] and found["count"] >= 2, found  # the tool's and the records' attempt
    assert all("hidden shape #0" in r["errors"][0]["message"] for r in found["results"])
    assert _leaks(json.dumps(found)) == []
    con = sqlite3.connect(graded["root"] / "experience.sqlite")
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        texts = [v for t in tables for row in con.execute(f'SELECT * FROM "{t}"')
                 for v in row if isinstance(v, str)]
    finally:
        con.close()
    assert texts and [x for x in texts if _leaks(x)] == []


def test_leaderboard_page_redacts_and_the_private_page_keeps(graded: dict[str, Any], tmp_path: Path) -> None:
    full: Report = graded["full"]
    verdict, stage, code, message, speedup, src = classify(full)
    row = EvalRow(submission="shape-leaker", task="vector_add_small", file_sha="f" * 64,
                  round="main", verdict=verdict, stage=stage, code=code, message=message,
                  speedup=speedup, speedup_source=src, t_sub_ms=None,
                  report_json=full.model_dump_json(), wall_s=1.0, engine="local")
    state = tmp_path / "lb.sqlite"
    with State.open(state) as st:
        st.set_meta("tasks", ["vector_add_small"])
        st.set_meta(SHAPES_META, shape_meta([task_payload(TASK, Secret(b"k" * 32, "test"))]))
        st.record_evaluation(row)
    render_site(state, tmp_path / "site")
    pages = {p: p.read_text() for p in (tmp_path / "site").rglob("*.html")}
    assert len(pages) == 2 and all(_leaks(t) == [] for t in pages.values())
    assert any("hidden shape #0" in t for t in pages.values())
    render_site(state, tmp_path / "private", private=True)
    private = "".join(p.read_text() for p in (tmp_path / "private").rglob("*.html"))
    assert "37, 999" in private and "private page" in private
