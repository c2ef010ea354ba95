"""`kgrader experience` end to end: records made by really grading examples/softmax on the
CPU (bubblewrap, Triton interpreter), then queried, imported, counted and searched.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from grader.experience.hooks import host_cpu_model

from .conftest import agent_retries, kgrader, retried

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "examples" / "softmax"
CANDS = SOFTMAX / "candidates"

pytestmark = pytest.mark.bwrap


@dataclass(frozen=True)
class Graded:
    root: Path
    db: Path
    records: Path
    env: dict[str, str]


def ok_json(*args: str | Path, env: dict[str, str]) -> Any:
    p = kgrader(*args, env=env)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    return json.loads(p.stdout)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Graded:
    root = tmp_path_factory.mktemp("experience")
    db = root / "experience.sqlite"
    env = {**os.environ, "KGRADER_EXPERIENCE": str(db), "PYTHONPATH": str(ROOT),
           "KGRADER_HARDWARE": str(root / "hardware.json")}
    records = root / "records"
    for _ in range(3):
        # On a loaded 2-core host the judge may rightly flag a timing of the good candidate
        # (work_escaped_timing); that evaluation would be stored too, so start afresh.
        shutil.rmtree(records, ignore_errors=True)
        for leftover in root.glob("experience.sqlite*"):
            leftover.unlink()
        if _grade_three(records, env):
            return Graded(root, db, records, env)
    pytest.fail("the good candidate's timing was flagged three times: the host is too busy")


def _grade_three(records: Path, env: dict[str, str]) -> bool:
    for cand, rc in (("good", 0), ("wrong", 1), ("no_mask", 1)):
        p = kgrader("run", SOFTMAX, CANDS / f"{cand}.py", "--backend", "bwrap", "--device", "cpu",
                    "--json", "--records", records, env=env)
        if cand == "good" and p.returncode == 1 and \
                [e["code"] for e in json.loads(p.stdout)["errors"]] == ["work_escaped_timing"]:
            return False
        assert p.returncode == rc, p.stderr
    return True


def test_failed_correctness_on_this_hardware_comes_from_the_real_records(graded: Graded) -> None:
    out = ok_json("experience", "query", "--tag", "softmax", "--stage", "correctness", "--failed",
                  "--here", "--json", env=graded.env)
    assert out["store"] == str(graded.db) and out["count"] == 2
    shas = {r["candidate_sha256"] for r in out["results"]}
    assert shas == {_sha(CANDS / "wrong.py"), _sha(CANDS / "no_mask.py")}
    cpu = host_cpu_model()
    for r in out["results"]:
        assert r["task"] == "softmax" and r["stage"] == "correctness" and r["ok"] is False
        assert r["origin"] == "run" and r["tags"] == ["reduction", "softmax"]
        assert r["errors"][0]["code"] == "wrong_values"
        assert r["lesson"].startswith("failed correctness")
        assert "dims {M: " in r["lesson"] or "on hidden shape #" in r["lesson"]
        assert cpu is None or cpu in r["hardware"]
        assert "torch" in r["hardware"] and "backend bwrap" in r["hardware"]
    by_sha = {r["candidate_sha256"]: r for r in out["results"]}
    assert "only on a hidden shape" in by_sha[_sha(CANDS / "no_mask.py")]["lesson"]
    # the other filters narrow the same answer
    # no_mask failed on a hidden shape: its message (with "mismatch") was withheld when stored
    assert ok_json("experience", "query", "--code", "wrong_values", "--text", "mismatch", "--json",
                   env=graded.env)["count"] == 1
    assert ok_json("experience", "query", "--hardware", "no such gpu", "--json", env=graded.env)["count"] == 0


def test_passing_attempt_carries_its_timing(graded: Graded) -> None:
    out = ok_json("experience", "query", "--tag", "reduction", "--passed", "--dim", "N=256",
                  "--source", "--json", env=graded.env)
    (r,) = out["results"]
    assert r["candidate_sha256"] == _sha(CANDS / "good.py") and r["stage"] == "benchmark"
    assert r["median_ms"] > 0 and r["bandwidth_gbps"] > 0
    # the store keeps the candidate's copy: figures after a hidden-shape call are withheld
    # (grader/report/withhold.py), the median kept to 3 significant digits
    assert r["min_ms"] is None and float(f"{r['median_ms']:.3g}") == r["median_ms"]
    assert r["lesson"].startswith("passed")
    assert r["source"] == (CANDS / "good.py").read_text()


def test_table_output_and_stats(graded: Graded) -> None:
    p = kgrader("experience", "query", "--tag", "softmax", env=graded.env)
    assert p.returncode == 0 and "wrong_values" in p.stdout and "failed correctness" in p.stdout
    stats = ok_json("experience", "stats", "--json", env=graded.env)
    assert (stats["attempts"], stats["passed"], stats["failed"]) == (3, 1, 2)
    assert stats["failed_by_stage"] == {"correctness": 2} and stats["by_origin"] == {"run": 3}
    assert stats["by_tag"] == {"reduction": 3, "softmax": 3}


def test_records_folder_import_matches_what_the_hook_stored(graded: Graded) -> None:
    db = graded.root / "imported.sqlite"
    first = ok_json("experience", "add", graded.records, "--db", db, "--json", env=graded.env)
    again = ok_json("experience", "add", graded.records, "--db", db, "--json", env=graded.env)
    assert (first["imports"][0]["added"], first["imports"][0]["duplicates"]) == (3, 0)
    assert (again["imports"][0]["added"], again["imports"][0]["duplicates"]) == (0, 3)

    def keys(path: Path) -> set[str]:
        with sqlite3.connect(path) as conn:
            return {r[0] for r in conn.execute("SELECT key FROM attempts")}

    assert keys(db) == keys(graded.db)  # the same evaluations, identified the same way
    # and importing into the hooked store adds nothing
    dup = ok_json("experience", "add", graded.records, "--json", env=graded.env)
    assert dup["imports"][0]["duplicates"] == 3


def _bad(graded: Graded, *args: str | Path) -> str:
    p = kgrader(*args, env=graded.env)
    assert p.returncode == 2, (args, p.stdout, p.stderr)
    assert p.stderr.startswith("error: ") and "Traceback" not in p.stderr, p.stderr
    return p.stderr


def test_bad_inputs_are_one_line_errors_with_exit_2(graded: Graded) -> None:
    assert "not a shape filter" in _bad(graded, "experience", "query", "--dim", "N>>3")
    assert "no experience store" in _bad(graded, "experience", "query", "--db", graded.root / "missing.sqlite")
    corrupt = graded.root / "corrupt.sqlite"
    corrupt.write_bytes(b"\x00garbage, not SQLite" * 300)
    assert "not a readable kgrader experience store" in _bad(graded, "experience", "stats", "--db", corrupt)
    newer = graded.root / "newer.sqlite"
    shutil.copy(graded.db, newer)
    with sqlite3.connect(newer) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    assert "newer than the version" in _bad(graded, "experience", "query", "--db", newer)
    assert "text search is empty" in _bad(graded, "experience", "query", "--text", "  ")
    assert "no such file" in _bad(graded, "experience", "add", graded.root / "nothing-here")
    off = {**graded.env, "KGRADER_EXPERIENCE": "off"}
    p = kgrader("experience", "stats", env=off)
    assert p.returncode == 2 and "switched off" in p.stderr


def test_agent_tool_searches_without_revealing_hidden_shapes(graded: Graded) -> None:
    ws = graded.root / "ws"
    ok_json("workspace", "init", ws, "--task", SOFTMAX, "--backend", "bwrap", "--device", "cpu",
            env=graded.env)

    def spoiled(p: Any) -> bool:  # what a busy host makes is retried, as an agent would
        assert p.returncode == 0 or agent_retries(json.loads(p.stdout)["errors"]), p.stdout
        return p.returncode != 0

    p = retried(lambda: kgrader("bench", "--workspace", ws, CANDS / "good.py", env=graded.env),
                spoiled, wait_s=15)
    assert p.returncode == 0, p.stderr  # a tool evaluation reaches the store too
    schema = {t["function"]["name"]: t for t in
              ok_json("tools", "schema", env=graded.env)}["search_experience"]
    assert "dims" in schema["function"]["parameters"]["properties"]

    out = ok_json("tool", "search_experience", "--workspace", ws, "--args",
                  json.dumps({"tag": "softmax", "outcome": "failed", "stage": "correctness"}),
                  env=graded.env)
    assert out["ok"] and out["count"] == 2
    for r in out["results"]:
        assert r["lesson"].startswith("failed correctness")
        assert all(s["kind"] != "hidden" for s in r["shapes"])
    # N=1000 is only a hidden shape of softmax, and the store keeps no hidden shape: neither
    # the operator's query nor the agent's finds it
    assert ok_json("experience", "query", "--dim", "N>=1000", "--stage", "correctness", "--json",
                   env=graded.env)["count"] == 0
    probe = ok_json("tool", "search_experience", "--workspace", ws, "--args",
                    json.dumps({"dims": ["N>=1000"], "stage": "correctness"}), env=graded.env)
    assert probe["count"] == 0

    best = ok_json("tool", "search_experience", "--workspace", ws, "--args",
                   json.dumps({"outcome": "passed", "limit": 5}), env=graded.env)
    assert best["count"] == 2 and {r["origin"] for r in best["results"]} == {"run", "tool"}
    assert all(r["median_ms"] > 0 for r in best["results"])
    medians = [r["median_ms"] for r in best["results"]]
    assert medians == sorted(medians)  # same task and hardware: fastest first
    calls = [json.loads(line) for line in (ws / "records" / "tool-calls.jsonl").read_text().splitlines()]
    assert [c["name"] for c in calls][-3:] == ["search_experience"] * 3

    for bad in ({"dims": ["N>>1"]}, {"limit": 99}, {"outcome": "maybe"}, {"text": 5}, {"rm": 1}):
        p = kgrader("tool", "search_experience", "--workspace", ws, "--args", json.dumps(bad),
                    env=graded.env)
        assert p.returncode == 2 and p.stderr.startswith("error: ") and "Traceback" not in p.stderr, bad


def test_mcp_client_gets_the_same_search(graded: Graded) -> None:
    import anyio
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    ws = graded.root / "ws-mcp"
    ok_json("workspace", "init", ws, "--task", SOFTMAX, "--backend", "bwrap", "--device", "cpu",
            env=graded.env)
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "grader.cli", "mcp", "--workspace", str(ws)],
                                   env=graded.env, cwd=str(ROOT))

    async def session() -> tuple[Any, Any]:
        async with Client(params, read_timeout_seconds=120) as client:
            good = await client.call_tool("search_experience", {"tag": "softmax", "stage": "correctness",
                                                                "outcome": "failed", "text": "mismatch"})
            bad = await client.call_tool("search_experience", {"dims": ["N>>1"]})
            return good.structured_content, bad.structured_content

    good, bad = anyio.run(session)
    # one of the two: no_mask's message (a hidden-shape failure) was withheld when stored
    assert good["ok"] and good["count"] == 1 and good["text_search"] in ("fts5", "like")
    assert all(r["lesson"].startswith("failed correctness") for r in good["results"])
    # the tool's schema refuses the filter before the store parses it: a typed bad argument
    err = bad["errors"][0]
    assert bad["ok"] is False and err["code"] in ("bad_argument", "bad_dim_filter"), bad
    assert "dims" in json.dumps(err), err
