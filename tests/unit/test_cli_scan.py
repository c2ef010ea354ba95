"""``kgrader scan --task``, ``policy show --full/--json`` and ``policy test``'s classes."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from grader.cli.app import main
from grader.cli.scan import CASE_CLASSES

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "examples" / "vector_add_small"
BROKEN = SMALL / "candidates" / "broken.py"


def _json(*args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = CliRunner().invoke(main, [*args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def test_scan_with_task_uses_the_tasks_policy_and_points_at_the_misspelt_decorator() -> None:
    rc, doc = _json("scan", "--task", str(SMALL), str(BROKEN))
    assert rc == 1 and doc["policy"] == "triton-only" and doc["policy_from"] == f"task {SMALL}"
    first = doc["files"][0]["findings"][0]
    assert (first["rule"], first["line"]) == ("require-triton-kernel", 10)
    assert "@trition.jit on add_kernel() is not a Triton decorator" in first["message"]
    assert "not defined or imported" in first["message"]
    # without --task: the default policy, which lets the file through to its NameError
    rc, doc = _json("scan", str(BROKEN))
    assert rc == 0 and doc["policy"] == "default" and doc["policy_from"] == "default"


def test_an_explicit_policy_wins_over_the_tasks() -> None:
    rc, doc = _json("scan", "--task", str(SMALL), "--policy", "default", str(BROKEN))
    assert rc == 0 and doc["policy"] == "default" and doc["policy_from"] == "--policy"


def test_a_decorator_from_another_module_says_what_it_is(tmp_path: Path) -> None:
    f = tmp_path / "k.py"
    f.write_text("import triton\nimport triton.language as tl\n\n@tl.jit\ndef k(x):\n    pass\n")
    rc, doc = _json("scan", "--policy", "triton-only", str(f))
    msg = next(x for x in doc["files"][0]["findings"] if x["rule"] == "require-triton-kernel")
    assert rc == 1 and msg["line"] == 4 and "tl is triton.language, not triton" in msg["message"]


def test_a_file_without_any_kernel_still_says_so_at_line_1(tmp_path: Path) -> None:
    f = tmp_path / "k.py"
    f.write_text("import torch\n\ndef launch(x):\n    return x\n")
    rc, doc = _json("scan", "--policy", "triton-only", str(f))
    msg = next(x for x in doc["files"][0]["findings"] if x["rule"] == "require-triton-kernel")
    assert rc == 1 and msg["line"] == 1 and "no @triton.jit function is defined" in msg["message"]


def test_policy_show_full_and_json_cut_no_list() -> None:
    short = CliRunner().invoke(main, ["policy", "show", "default"]).stdout
    full = CliRunner().invoke(main, ["policy", "show", "default", "--full"]).stdout
    assert "... (+" in short and "... (+" not in full
    assert "asyncio.subprocess*" in full and "asyncio.subprocess*" not in short
    rc, doc = _json("policy", "show", "default")
    spawn = next(r for r in doc["rules"] if r["id"] == "process-spawn")
    assert rc == 0 and len(spawn["refs"]) == 15 and spawn["effective_severity"] == "deny"
    assert doc["name"] == "default" and doc["chain"] == ["default"]


def test_policy_list_json_names_every_shipped_policy() -> None:
    rc, doc = _json("policy", "list")
    names = {p["name"] for p in doc["policies"]}
    assert rc == 0 and {"default", "triton-only", "strict"} <= names


def test_policy_test_tells_let_through_from_denied_by_another_rule(tmp_path: Path) -> None:
    cases = {
        "fine.py": "# expect: deny os-module\nimport os\n",
        "let_through.py": "# expect: deny os-module\nx = 1\n",
        "other_rule.py": "# expect: deny os-module\nimport subprocess\n",
        "newly_denied.py": "# expect: allow\nimport os\n",
        "no_header.py": "x = 1\n",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    rc, doc = _json("policy", "test", "default", str(tmp_path))
    got = {c["file"]: c["class"] for c in doc["cases"]}
    assert rc == 1 and got == {"fine.py": "as expected", "let_through.py": "let through",
                               "other_rule.py": "denied by another rule",
                               "newly_denied.py": "newly denied", "no_header.py": "no header"}
    assert doc["mismatches"] == 4 and set(doc["classes"]) <= set(CASE_CLASSES)
    human = CliRunner().invoke(main, ["policy", "test", "default", str(tmp_path)]).stdout
    assert "1 let through" in human and "1 denied by another rule" in human
    assert "let_through.py" in human  # piped: not folded away at 80 columns


def test_policy_diff_names_the_three_rules_strict_turns_from_warn_to_deny() -> None:
    rc, doc = _json("policy", "diff", "triton-only", "strict")
    assert rc == 0 and doc["identical"] is False
    changed = {r["rule"]: r for r in doc["rules"]}
    assert set(changed) == {"raise-system-exit", "cuda-event", "tensor-data-movement"}
    for r in changed.values():
        assert r["status"] == "changed" and r["severity_changed"] is True
        assert r["severity"] == {"a": "warn", "b": "deny"} and r["threat"]
    assert doc["settings"] == {"promote_warnings": {"a": False, "b": True}}
    assert doc["counts"] == {"added": 0, "removed": 0, "severity_changed": 3,
                             "parameters_changed": 0}
    human = CliRunner().invoke(main, ["policy", "diff", "triton-only", "strict"]).stdout
    assert "changed raise-system-exit: warn -> deny" in human
    assert "promote_warnings: false -> true" in human and "3 severity changed" in human


def test_policy_diff_both_ways_added_removed_parameters_and_the_allowlist(tmp_path: Path) -> None:
    rc, doc = _json("policy", "diff", "default", "triton-only")
    added = {r["rule"] for r in doc["rules"] if r["status"] == "added"}
    assert rc == 0 and {"require-triton-kernel", "matmul-operator"} <= added
    assert doc["allowlist"] == {"present": {"only_a": [], "only_b": ["allowlist"]}}
    rc, back = _json("policy", "diff", "triton-only", "default")
    assert {r["rule"] for r in back["rules"] if r["status"] == "removed"} == added
    # a child policy that changes one rule's message and drops another
    child = tmp_path / "child.toml"
    child.write_text('extends = "default"\ndisable = ["threads"]\n'
                     '[overrides.process-spawn]\nmessage = "no processes here"\n')
    rc, doc = _json("policy", "diff", "default", str(child))
    rules = {r["rule"]: r for r in doc["rules"]}
    assert rc == 0 and set(rules) == {"threads", "process-spawn"}
    assert rules["threads"]["status"] == "removed"
    assert rules["process-spawn"]["parameters"]["message"]["b"] == "no processes here"
    assert rules["process-spawn"]["severity_changed"] is False
    rc, doc = _json("policy", "diff", "default", "default")
    assert rc == 0 and doc["identical"] is True and doc["rules"] == []
    rc, doc = _json("policy", "diff", "default", "no-such-policy")
    assert rc == 2 and doc["error"]["code"] == "bad_policy"


def test_every_finding_carries_its_threat_and_scan_says_its_policy(tmp_path: Path) -> None:
    f = tmp_path / "k.py"
    f.write_text("import os\nimport time\ntime.perf_counter = lambda: 0.0\nos.system('id')\n")
    rc, doc = _json("scan", "--policy", "triton-only", str(f))
    findings = doc["files"][0]["findings"]
    assert rc == 1 and findings and doc["warnings"] == [] and doc["task_policy"] is None
    assert all(x["threat"] for x in findings), findings
    own = {x["rule"]: x["threat"] for x in findings}
    assert "module-not-allowed" in own and "allow-list" in own["module-not-allowed"]
    result = CliRunner().invoke(main, ["scan", str(f)])
    assert result.stdout.startswith("policy default (the default, as neither --policy nor "
                                    "--task was given")
    assert "      threat: " in result.stdout


def test_scan_warns_when_the_policy_asked_for_is_not_the_tasks_own() -> None:
    result = CliRunner().invoke(main, ["scan", "--task", str(SMALL), "--policy", "default",
                                       str(BROKEN), "--json"])
    doc = json.loads(result.stdout)
    assert result.exit_code == 0 and doc["task_policy"] == "triton-only"
    assert len(doc["warnings"]) == 1 and "task vector_add_small's own policy is 'triton-only'" \
        in doc["warnings"][0]
    assert "warning: scanning with policy 'default'" in result.stderr
    same = CliRunner().invoke(main, ["scan", "--task", str(SMALL), "--policy", "triton-only",
                                     str(BROKEN)])
    assert "warning" not in same.stderr and same.stdout.startswith("policy triton-only (named")
