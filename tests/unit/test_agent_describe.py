"""describe_task (grader/agent/describe.py): what an agent is told about its task, on the
host alone (no sandbox), and what it is never told (hidden shapes, seeds)."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from grader.agent import tools
from grader.agent.describe import policy_summary
from grader.scan import load_policy

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "examples" / "vector_add_small"


def _ws(tmp_path: Path, task: Path = TASK, **kw: Any) -> tools.Workspace:
    return tools.init_workspace(tmp_path / "ws", task, backend="bwrap", device=kw.pop("device", "cpu"),
                                **kw)


def _ints(x: Any) -> set[int]:
    if isinstance(x, bool):
        return set()
    if isinstance(x, int):
        return {x}
    if isinstance(x, dict):
        return set().union(*(_ints(v) for v in x.values())) if x else set()
    if isinstance(x, list):
        return set().union(*(_ints(v) for v in x)) if x else set()
    return set()


def test_describes_the_dps_contract_in_call_order(tmp_path: Path) -> None:
    d = tools.describe_task(_ws(tmp_path))
    assert d["ok"] and d["tool"] == "describe_task" and d["task"] == "vector_add_small"
    assert d["contract"] == "dps" and d["signature"] == "launch(x, y, out)"
    assert [(t["position"], t["name"], t["role"], t["dtype"], t["shape"]) for t in d["tensors"]] == [
        (0, "x", "input", "float16", ["M", "N"]), (1, "y", "input", "float16", ["M", "N"]),
        (2, "out", "output", "float16", ["M", "N"])]
    assert d["shapes"]["tune"] == [{"M": 64, "N": 1024}] and d["shapes"]["timed"] == {"M": 64, "N": 1024}
    assert d["tolerances"] == {"atol": 0.001, "rtol": 0.001, "max_mismatch_fraction": 0.0, "seeds": 2}
    assert d["acceptance"]["rule"] == "controlled" and d["benchmark"]["cache"] == "cold"
    assert d["cost_model"] == {"bytes": "6*M*N", "flops": "M*N"}
    assert d["timed_bytes"] == 6 * 64 * 1024 and d["timed_flops"] == 64 * 1024
    assert d["reference_source"] == (TASK / "reference.py").read_text()
    json.dumps(d)  # plain JSON


def test_hidden_shapes_and_seeds_are_a_count_only(tmp_path: Path) -> None:
    # The secrets are drawn for this test, far from anything a clock prints: 62-bit seeds
    # (19 digits) and hidden dimensions of 8 digits. The task's own (seeds 17, 29; dims like
    # 37) share digits with any timestamp the result holds (a calibration's "19:17:37"), so a
    # substring check on them tested the clock, not the channel.
    rng = random.SystemRandom()
    task = tmp_path / "task"
    shutil.copytree(TASK, task)
    spec = json.loads((task / "task.json").read_text())
    spec["correctness"]["seeds"] = [rng.getrandbits(62) | 1 << 61 for _ in range(2)]
    big = [rng.randrange(10_000_000, 100_000_000) for _ in range(3)]
    spec["shapes"]["hidden"] = [{"M": big[0], "N": 1}, {"M": 1, "N": big[1]}, {"M": big[2], "N": 1}]
    (task / "task.json").write_text(json.dumps(spec))
    tune_vals = {v for b in spec["shapes"]["tune"] for v in b.values()}
    secret = {v for b in spec["shapes"]["hidden"] for v in b.values() if v >= 2} - tune_vals
    secret |= set(spec["correctness"]["seeds"])
    assert len(secret) == 5  # three hidden dimensions, two seeds
    d = tools.describe_task(_ws(tmp_path, task))
    assert d["shapes"]["hidden_count"] == len(spec["shapes"]["hidden"])
    assert "hidden" not in d["shapes"] or not isinstance(d["shapes"].get("hidden"), list)
    assert _ints(d) & secret == set()  # no structured field holds one
    text = json.dumps(d)
    assert [s for s in secret if re.search(rf"(?<!\d){s}(?!\d)", text)] == []


def test_the_reference_is_withheld_when_the_workspace_says_so(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    cfg = json.loads((ws.root / "kgrader.json").read_text())
    cfg["show_reference"] = False  # the operator's setting in kgrader.json
    (ws.root / "kgrader.json").write_text(json.dumps(cfg))
    ws = tools.Workspace.open(ws.root)
    d = tools.describe_task(ws)
    assert d["reference_source"] is None
    assert "does not show" in d["unmeasured"]["reference_source"]


def test_a_reference_naming_a_hidden_value_is_withheld_not_altered(tmp_path: Path) -> None:
    task = tmp_path / "task"
    shutil.copytree(TASK, task)
    ref = task / "reference.py"
    ref.write_text(ref.read_text() + "\n# special case: N == 1031\n")
    d = tools.describe_task(_ws(tmp_path, task))
    assert d["reference_source"] is None
    assert "hidden dimension" in d["unmeasured"]["reference_source"]
    assert "1031" not in json.dumps(d)


def test_an_operator_description_naming_a_hidden_value_is_scrubbed(tmp_path: Path) -> None:
    task = tmp_path / "task"
    shutil.copytree(TASK, task)
    spec = json.loads((task / "task.json").read_text())
    spec["description"] = "tuned for N = 1031 too"
    (task / "task.json").write_text(json.dumps(spec))
    d = tools.describe_task(_ws(tmp_path, task))
    assert "1031" not in json.dumps(d) and d["description"] == "tuned for N = <hidden> too"


def test_policy_summary_lists_the_allow_list_of_a_kernel_only_policy() -> None:
    s = policy_summary(load_policy("triton-only"))
    assert s["kind"] == "allow-list" and s["chain"] == ["triton-only", "default"]
    mods = s["allowed"]["modules"]
    assert "triton.language" in mods and "empty" in mods["torch"]["names"]
    assert "add" not in mods["torch"]["names"]  # torch compute is not on the list
    assert s["allowed"]["attributes_outside_kernels"]
    assert "require-triton-kernel" in {r["id"] for r in s["deny_rules"]}
    d = policy_summary(load_policy("default"))
    assert d["kind"] == "deny-list" and "allowed" not in d and d["deny_rules"]


def test_roofline_floor_from_datasheet_on_cuda_and_none_on_an_uncalibrated_cpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGRADER_HARDWARE", str(tmp_path / "hardware.json"))  # no calibration
    cpu = tools.describe_task(_ws(tmp_path / "a"))
    assert cpu["roofline_floor_ms"] is None and "no calibrated peaks" in cpu["unmeasured"][
        "roofline_floor_ms"]
    cuda = tools.describe_task(_ws(tmp_path / "b", device="cuda"))
    assert cuda["roofline_floor_ms"] is not None and cuda["roofline_floor_ms"] > 0
    assert "datasheet" in cuda["floor_source"]


def test_a_kernelbench_task_states_the_returned_outputs_contract(tmp_path: Path) -> None:
    from grader.formats.kernelbench.importer import import_problem

    problem = REPO / "examples" / "field" / "kernelbench" / "problems" / "1_ReLU.py"
    imported = import_problem(problem)
    task = tmp_path / "kb"
    task.mkdir()
    (task / "task.json").write_text(imported.spec.model_dump_json())
    (task / "reference.py").write_text(imported.reference)
    d = tools.describe_task(_ws(tmp_path, task))
    assert d["contract"] == "module" and d["returns_outputs"] is True
    assert d["entrypoint"] == "ModelNew" and "ModelNew" in d["contract_text"]
    assert d["tensors"] == [] and d["problem"]["inputs"] == "get_inputs"
    assert d["policy"]["name"] == "cuda-inline"


def test_describe_task_is_logged_like_every_tool_call(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    tools.call_tool(ws, "describe_task", {})
    log = (ws.root / "records" / "tool-calls.jsonl").read_text().splitlines()
    assert json.loads(log[-1])["name"] == "describe_task"
