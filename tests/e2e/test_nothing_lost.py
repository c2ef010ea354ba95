"""Bad output paths and bad inputs: a typed error with the documented exit code before any
grading, and a grade whose destination fails afterwards is never lost (issue 44).

Real CLI (a subprocess), real bubblewrap and Triton's CPU interpreter where a grade runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import SANDBOX, kgrader

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "examples" / "vector_add_small"
GOOD = SMALL / "candidates" / "good.py"


def _error_doc(p: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in p.stderr, p.stderr
    doc: dict[str, Any] = json.loads(p.stdout)
    assert doc["ok"] is False and doc["exit_code"] == p.returncode
    return doc


@pytest.mark.parametrize("option,path", [
    ("--out", "/proc/kgrader-nope"), ("--out", "/etc/passwd"), ("--records", "/proc/nope"),
    ("--records", "/sys/kgrader-nope/deeper"),
])
def test_an_unwritable_output_path_is_refused_before_any_grading(option: str, path: str) -> None:
    t0 = time.monotonic()
    p = kgrader("run", *SANDBOX, "--json", option, path, SMALL, GOOD)
    took = time.monotonic() - t0
    assert p.returncode == 2, p.stderr
    doc = _error_doc(p)
    assert doc["error"]["code"] == "bad_output_path" and doc["error"]["origin"] == "usage"
    assert doc["error"]["message"].startswith(f"{option} {path}")
    assert "kgrader run: +" not in p.stderr, "it started grading before refusing the path"
    assert took < 15, f"refusing a path took {took:.1f} s: a grade ran first"


def test_a_records_folder_whose_evals_folder_is_a_file_is_refused_up_front(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "evals").write_text("not a folder")
    p = kgrader("run", *SANDBOX, "--json", "--records", rec, SMALL, GOOD)
    assert p.returncode == 2
    doc = _error_doc(p)
    assert doc["error"]["code"] == "bad_output_path" and "--records folder" in doc["error"]["message"]
    assert "kgrader run: +" not in p.stderr


@pytest.mark.bwrap
@pytest.mark.parametrize("as_json", [True, False])
def test_an_out_folder_lost_during_the_grade_keeps_the_report(tmp_path: Path,
                                                              as_json: bool) -> None:
    """--out passes the check, then becomes a file while the sandbox grades: the report
    still reaches stdout and a named fallback file, exit 2, both paths in the message."""
    out, unsaved = tmp_path / "out", tmp_path / "unsaved"
    env = {**os.environ, "KGRADER_UNSAVED_DIR": str(unsaved)}
    args = [sys.executable, "-m", "grader.cli", "run", *SANDBOX, "--progress", "--out", str(out), *(["--json"] if as_json else []), str(SMALL),
            str(GOOD)]
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()  # the first step line comes after the path checks
    assert "kgrader run: +" in first, first
    if out.exists():
        shutil.rmtree(out)
    out.write_text("now a file")  # what the grade will find when it writes report.json
    stdout, rest = proc.communicate(timeout=600)
    stderr = first + rest
    assert proc.returncode == 2, stderr
    assert "Traceback" not in stderr, stderr
    kept = sorted(unsaved.glob("kgrader-report-*.json"))
    assert len(kept) == 1, stderr
    saved = json.loads(kept[0].read_text())
    assert saved["ok"] is True and saved["stage"] == "benchmark"
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: --out {out}: cannot write report.json"), last
    assert f"saved to {kept[0]}" in last and "on stdout" in last
    if as_json:
        assert json.loads(stdout) == saved  # one document: the report itself
    else:
        assert stdout.startswith("PASS") and "task=vector_add_small" in stdout
    assert out.read_text() == "now a file"


def test_a_missing_current_is_named_as_the_current(tmp_path: Path) -> None:
    p = kgrader("run", *SANDBOX, "--json", "--current", "/nope.py", SMALL, GOOD)
    assert p.returncode == 2
    doc = _error_doc(p)
    assert doc["error"]["code"] == "bad_current_file" and doc["error"]["origin"] == "usage"
    assert doc["error"]["message"] == "current not found: /nope.py"
    assert "candidate" not in p.stderr
    p = kgrader("run", *SANDBOX, "--current", tmp_path, SMALL, GOOD)
    assert p.returncode == 2 and p.stderr.strip() == f"error: current is a directory: {tmp_path}"


def _task_copy(tmp_path: Path, **changes: Any) -> Path:
    task = tmp_path / "task"
    shutil.copytree(SMALL, task)
    spec = json.loads((task / "task.json").read_text())
    for k, v in changes.items():
        if v is None:
            spec.pop(k)
        else:
            spec[k] = v
    (task / "task.json").write_text(json.dumps(spec))
    return task


def test_a_task_without_tensors_says_tensors_are_missing(tmp_path: Path) -> None:
    task = _task_copy(tmp_path, tensors=None)
    p = kgrader("run", *SANDBOX, "--json", task, GOOD)
    assert p.returncode == 2
    doc = _error_doc(p)
    assert doc["error"]["code"] == "bad_task"
    assert "tensors is missing or empty" in doc["error"]["message"]
    assert str(task / "task.json") in doc["error"]["message"]


def test_an_unknown_policy_in_task_json_names_task_json_and_the_policy(tmp_path: Path) -> None:
    task = _task_copy(tmp_path, policy="no-such-policy")
    for extra in ([], ["--policy", "default"]):  # refused even when the run names another
        p = kgrader("run", *SANDBOX, "--json", *extra, task, GOOD)
        assert p.returncode == 2
        doc = _error_doc(p)
        msg = doc["error"]["message"]
        assert doc["error"]["code"] == "bad_task", msg
        assert msg.startswith(f"{task / 'task.json'}: its policy 'no-such-policy'"), msg
        assert "unknown policy" in msg and "triton-only" in msg  # the known ones listed
    p = kgrader("scan", "--task", task, GOOD)
    assert p.returncode == 2 and str(task / "task.json") in p.stderr, p.stderr


def test_serve_refuses_an_unwritable_data_folder_before_serving(tmp_path: Path) -> None:
    p = kgrader("serve", "--tasks", ROOT / "examples", "--data", "/proc/kgrader-nope",
                "--port", "1", timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("error: --data /proc/kgrader-nope: ")
    assert "serving" not in p.stderr and "http://" not in p.stderr
    p = kgrader("serve", "--data", "/proc/kgrader-nope", "token", "list", "--json", timeout=60)
    assert p.returncode == 2
    assert _error_doc(p)["error"]["code"] == "bad_output_path"


def test_leaderboard_state_and_site_paths_are_refused_up_front(tmp_path: Path) -> None:
    subs = ROOT / "examples" / "leaderboard" / "submissions"
    p = kgrader("leaderboard", "run", "--tasks", SMALL, "--submissions", subs, *SANDBOX,
                "--state", "/proc/kgrader.sqlite", "--json", timeout=120)
    assert p.returncode == 2
    doc = _error_doc(p)
    assert doc["error"]["code"] == "bad_output_path"
    assert doc["error"]["message"].startswith("--state /proc/kgrader.sqlite")
    p = kgrader("leaderboard", "demo", "/proc/kgrader-site", "--json", timeout=120)
    assert p.returncode == 2 and _error_doc(p)["error"]["code"] == "bad_output_path"
    state = tmp_path / "s.sqlite"
    p = kgrader("leaderboard", "render", state, "/proc/kgrader-site", "--json", timeout=120)
    assert p.returncode == 2 and _error_doc(p)["error"]["code"] == "bad_output_path"



@pytest.mark.bwrap
def test_a_candidate_printing_10_mb_per_call_passes_and_the_human_report_says_it_was_cut(
        tmp_path: Path) -> None:
    chatty = '    print(("x" * 1023 + "\\n") * 10240, end="")  # 10 MiB per call\n'
    cand = tmp_path / "chatty.py"
    cand.write_text(GOOD.read_text().replace("    n = out.numel()\n",
                                             chatty + "    n = out.numel()\n"))
    assert "10 MiB per call" in cand.read_text()
    p = kgrader("run", *SANDBOX, "--no-progress", SMALL, cand, timeout=600, no_traceback=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("PASS")
    assert "output cut: the sandbox printed more than the 1048576 bytes kept" in p.stdout


def test_a_denied_run_names_each_denials_threat_family() -> None:
    attack = ROOT / "tests" / "attacks" / "asyncio_subprocess.py"
    p = kgrader("run", *SANDBOX, "--no-progress", SMALL, attack, no_traceback=True)
    assert p.returncode == 1 and p.stdout.startswith("FAIL")
    assert "scan/process-spawn" in p.stdout
    assert "threat: fork bomb; privilege escalation" in p.stdout
    p = kgrader("run", *SANDBOX, "--json", SMALL, attack)
    errors = json.loads(p.stdout)["errors"]
    assert errors and all(e["detail"]["threat"] for e in errors)


def test_policy_diff_through_the_cli() -> None:
    p = kgrader("policy", "diff", "triton-only", "strict", "--json", no_traceback=True)
    assert p.returncode == 0
    doc = json.loads(p.stdout)
    assert doc["counts"]["severity_changed"] == 3
