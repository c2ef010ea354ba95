"""`kgrader run` end to end: real bubblewrap, real torch and Triton (CPU interpreter)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from .conftest import kgrader

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "examples" / "vector_add_small"
CANDS = SMALL / "candidates"

pytestmark = pytest.mark.bwrap


def run_json(*args: str | Path) -> tuple[int, dict[str, Any]]:
    p = kgrader("run", *args, "--backend", "bwrap", "--device", "cpu", "--json")
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout)


def test_good_candidate_passes_with_timing_and_exit_0() -> None:
    rc, r = run_json(SMALL, CANDS / "good.py")
    assert rc == 0 and r["ok"] is True and r["stage"] == "benchmark" and r["errors"] == []
    t = r["timing"]
    assert t["median_ms"] > 0 and t["samples"] == 10 and t["clock"] == "perf_counter"
    assert t["bandwidth_gbps"] > 0 and t["checked_calls"] == 10
    assert r["correctness"]["passed"] and len(r["correctness"]["shapes_checked"]) == 4
    assert r["sandbox"]["backend"] == "bwrap" and r["sandbox"]["exit_code"] == 0
    assert r["scan"]["policy"] == "triton-only" and not r["scan"]["denied"]


def test_wrong_candidate_fails_at_correctness_with_first_bad_element() -> None:
    rc, r = run_json(SMALL, CANDS / "wrong.py")
    assert rc == 1 and r["ok"] is False and r["stage"] == "correctness"
    err = r["errors"][0]
    assert (err["stage"], err["code"]) == ("correctness", "wrong_values")
    bad = r["correctness"]["first_bad"]
    assert bad["tensor"] == "out" and len(bad["index"]) == 2
    assert bad["expected"] is not None and bad["actual"] is not None
    assert bad["expected"] != bad["actual"]


def test_no_mask_candidate_passes_tune_shapes_but_fails_on_a_hidden_shape() -> None:
    rc, r = run_json(SMALL, CANDS / "no_mask.py")
    assert rc == 1 and r["errors"][0]["stage"] == "correctness"
    bad = r["correctness"]["first_bad"]
    assert bad["shape_kind"] == "hidden" and bad["dims"] != {"M": 64, "N": 1024}


def test_broken_candidate_fails_at_compile_with_its_line_number() -> None:
    # The default policy lets it through the scan, so the import itself must fail.
    rc, r = run_json(SMALL, CANDS / "broken.py", "--policy", "default")
    assert rc == 1 and r["stage"] == "compile"
    err = r["errors"][0]
    assert (err["stage"], err["code"], err["line"]) == ("compile", "import", 10)
    assert "trition" in err["message"]


def test_broken_candidate_is_already_stopped_by_triton_only_scan_with_a_line() -> None:
    rc, r = run_json(SMALL, CANDS / "broken.py")
    assert rc == 1 and r["stage"] == "scan"
    err = r["errors"][0]
    # at the misspelt decorator, saying so: not "no kernel" at line 1
    assert (err["code"], err["line"]) == ("require-triton-kernel", 10), err
    assert "@trition.jit" in err["message"] and "misspelt" in err["message"]


def test_current_equal_to_candidate_is_not_accepted_and_both_rules_are_reported() -> None:
    rc, r = run_json(SMALL, CANDS / "good.py", "--current", CANDS / "good.py")
    assert rc == 1 and r["ok"] is False and r["stage"] == "accept"
    acc = r["acceptance"]
    assert acc["accepted"] is False and acc["pairs"] >= 5
    assert {x["rule"] for x in acc["rules"]} == {"seed", "controlled", "gain"}


@pytest.mark.parametrize("attack,rule", [("write_result_file.py", None), ("patch_allclose.py", None),
                                         ("os_exit_early.py", None)])
def test_issue_attacks_are_denied_by_the_default_policy_before_running(attack: str, rule: str | None) -> None:
    rc, r = run_json(SMALL, ROOT / "tests" / "attacks" / attack, "--policy", "default")
    assert rc == 1 and r["stage"] == "scan" and r["scan"]["denied"]
    assert r["sandbox"] is None  # nothing ran


def test_malformed_task_json_names_the_field(tmp_path: Path) -> None:
    task = tmp_path / "task"
    shutil.copytree(SMALL, task)
    spec = json.loads((task / "task.json").read_text())
    spec["tensors"][0]["dtype"] = "float13"
    (task / "task.json").write_text(json.dumps(spec))
    p = kgrader("run", task, CANDS / "good.py", "--backend", "bwrap", "--json")
    assert p.returncode == 2 and "tensors.0.dtype" in p.stderr and "Traceback" not in p.stderr
    doc = json.loads(p.stdout)  # --json: the one error document, nothing else
    assert doc["ok"] is False and doc["exit_code"] == 2
    assert doc["error"]["code"] == "bad_task" and doc["error"]["origin"] == "usage"
    assert "tensors.0.dtype" in doc["error"]["message"]


def test_task_json_that_is_not_json_reports_line_and_column(tmp_path: Path) -> None:
    task = tmp_path / "task"
    shutil.copytree(SMALL, task)
    (task / "task.json").write_text('{"name": "x",\n  oops}')
    p = kgrader("run", task, CANDS / "good.py")
    assert p.returncode == 2 and "task.json:2:" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("content,needle", [(None, "not found"), (b"", "empty"),
                                            (b"x = '\xff\xfe'\n", "UTF-8"),
                                            (b"\x7fELF\x00\x00\x01", "binary")])
def test_bad_candidate_files_give_a_clear_error_and_exit_2(tmp_path: Path, content: bytes | None,
                                                         needle: str) -> None:
    cand = tmp_path / "cand.py"
    if content is not None:
        cand.write_bytes(content)
    p = kgrader("run", SMALL, cand, "--backend", "bwrap", "--json")
    assert p.returncode == 2 and needle.lower() in p.stderr.lower() and "Traceback" not in p.stderr
    err = json.loads(p.stdout)["error"]
    assert (err["code"], err["origin"]) == ("bad_candidate_file", "candidate")
    assert needle.lower() in err["message"].lower()


def test_schema_command_prints_the_report_json_schema() -> None:
    p = kgrader("schema")
    schema = json.loads(p.stdout)
    assert p.returncode == 0 and schema["title"] == "kgrader report"
    for key in ("schema_version", "ok", "stage", "errors", "warnings", "correctness", "timing",
                "acceptance", "sandbox"):
        assert key in schema["properties"]


def test_human_output_and_out_folder(tmp_path: Path) -> None:
    p = kgrader("run", SMALL, CANDS / "wrong.py", "--backend", "bwrap", "--device", "cpu",
                "--out", tmp_path / "o")
    assert p.returncode == 1 and "FAIL" in p.stdout and "wrong_values" in p.stdout
    # the CPU run says it ran through the Triton interpreter, and on which backend
    first = p.stdout.splitlines()[0]
    assert "device=cpu" in first and first.endswith("(Triton interpreter)  backend=bwrap"), first
    assert "times are the interpreter's" in p.stdout
    saved = json.loads((tmp_path / "o" / "report.json").read_text())
    assert saved["errors"][0]["code"] == "wrong_values"


RUNTIME = ROOT / "tests" / "attacks" / "runtime"
RUNTIME_ONLY = ROOT / "tests" / "policies" / "runtime-only.toml"


@pytest.mark.parametrize("attack", ["kill_judge.py", "result_forgery.py"])
def test_candidate_that_attacks_its_judge_or_the_record_fails_with_exit_1(attack: str) -> None:
    # Exit 2 is for infrastructure only: attacking the harness is the candidate's failure.
    # The runner has a uid of its own: the kill and the write to /kg/out are refused at
    # import (stage compile, PermissionError); had they got through, the report would say
    # stage integrity (judge_died / result_forged, tests/unit/test_wire.py).
    rc, r = run_json(SMALL, RUNTIME / attack, "--policy", RUNTIME_ONLY)
    assert rc == 1 and r["ok"] is False, r
    err = r["errors"][0]
    assert err["origin"] == "candidate", r
    assert (err["stage"], err["code"]) in {("compile", "exception"), ("integrity", "judge_died"),
                                           ("integrity", "result_forged"),
                                           ("integrity", "out_tampered")}, r
    if err["stage"] == "compile":
        assert "PermissionError" in err["message"], r


def test_every_error_says_whose_fault_it_is() -> None:
    rc, r = run_json(SMALL, CANDS / "broken.py", "--policy", RUNTIME_ONLY)
    assert rc == 1 and r["errors"]
    assert all(e["origin"] == "candidate" for e in r["errors"]), r["errors"]



def test_calls_per_pair_keeps_pair_counts_and_still_decides(tmp_path: Path) -> None:
    """A task timing 3 calls per side in each pair: the report counts pairs, not calls,
    and the decision runs as with single-call pairs (same candidate: not accepted)."""
    task = tmp_path / "task"
    shutil.copytree(SMALL, task)
    spec = json.loads((task / "task.json").read_text())
    spec["acceptance"].update({"rule": "seed", "pairs": 6, "calls_per_pair": 3})
    (task / "task.json").write_text(json.dumps(spec))
    rc, r = run_json(task, CANDS / "good.py", "--current", CANDS / "good.py")
    assert rc in (0, 1) and r["stage"] == "accept", r["errors"]
    assert not [e for e in r["errors"] if e["stage"] != "accept"], r["errors"]
    assert r["acceptance"]["pairs"] == 6
