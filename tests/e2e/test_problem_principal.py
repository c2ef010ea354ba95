"""Problem code is an untrusted principal: imported problems that attack the judge.

Each problem in tests/attacks/problems/ is imported with `kgrader task import kernelbench`
and graded with a submission that computes nothing (zeros). A problem that could patch
the judge, read its secrets or read the submission turns that into `ok: true`; problem
code runs in a process of its own (sandbox/problem/host.py), so every attack must end in
the submission's own `wrong_values`, never a pass, never an infrastructure error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ._backends import backend_or_skip
from .conftest import agent_retries, kgrader, retried

ROOT = Path(__file__).resolve().parents[2]
ATTACKS = ROOT / "tests" / "attacks" / "problems"
NOTHING = ATTACKS / "nothing.py"


def import_attack(name: str, out: Path, backend: str) -> Path:
    p = kgrader("task", "import", "kernelbench", ATTACKS / f"{name}.py", "--out", out,
                "--policy", "default", "--backend", backend, "--device", "cpu")
    assert p.returncode == 0, p.stderr
    folder = out / f"kb_{name}"
    spec = json.loads((folder / "task.json").read_text())
    spec["benchmark"] = {"warmup": 1, "samples": 3, "reps": 2}
    (folder / "task.json").write_text(json.dumps(spec))
    return folder


def grade(task: Path, submission: Path, backend: str, *extra: str
          ) -> tuple[int, dict[str, Any], str]:
    p = kgrader("run", task, submission, "--backend", backend, "--device", "cpu", "--json", *extra)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout), p.stdout


@pytest.mark.parametrize("attack", ["patch_judge_check", "read_judge_secret",
                                    "read_candidate_source"])
@pytest.mark.bwrap
def test_problem_code_cannot_pass_a_submission_that_computes_nothing(tmp_path: Path,
                                                                     attack: str) -> None:
    backend = backend_or_skip("bwrap")
    rc, r, raw = grade(import_attack(attack, tmp_path, backend), NOTHING, backend)
    assert rc == 1 and r["ok"] is False, r
    codes = [(e["stage"], e["code"], e["origin"]) for e in r["errors"]]
    assert codes[0] == ("correctness", "wrong_values", "candidate"), codes
    assert "ModelNew" not in raw  # the submission's source did not travel into the report


@pytest.mark.docker
def test_problem_code_cannot_patch_the_judge_under_docker(tmp_path: Path) -> None:
    backend = backend_or_skip("docker")
    rc, r, _ = grade(import_attack("patch_judge_check", tmp_path, backend), NOTHING, backend)
    assert rc == 1 and r["ok"] is False, r["errors"]
    # The whole first error on a mismatch: CI once saw work_between_calls here (one of three
    # whole suites, 2026-12-06; not reproduced in 16 runs, idle and beside two busy loops),
    # and only the code was kept.
    assert next((e["code"], e["origin"]) for e in r["errors"]) == ("wrong_values", "candidate"), \
        r["errors"][0]


@pytest.mark.bwrap
def test_the_honest_reference_behind_the_attacks_still_grades_an_honest_submission(
        tmp_path: Path) -> None:
    """The same problem file passes a correct submission: the attack problems are sound
    tasks whose attacks fail, not broken ones (which would fail every submission)."""
    backend = backend_or_skip("bwrap")
    good = tmp_path / "relu.py"
    good.write_text("import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
                    "    def forward(self, x):\n        return torch.relu(x)\n")
    task = import_attack("read_judge_secret", tmp_path, backend)
    # Correctness is what the problem decides. The timing of a ~5 us relu on the CPU sits
    # inside the judge's round-trip noise (0.3-5 ms on an idle 2-core VM), so the benchmark
    # may say timing_unreliable (infrastructure, retried): the test retries as a caller
    # does, and the honest submission must pass in the end.
    rc, r, _ = retried(lambda: grade(task, good, backend),
                       lambda got: got[0] != 0 and agent_retries(got[1]["errors"]))
    assert r["correctness"]["checks"] > 0, r
    assert not [e for e in r["errors"] if e["origin"] != "infrastructure"], r["errors"]
    assert rc == 0 and r["ok"] is True, r["errors"]


@pytest.mark.bwrap
def test_a_crashing_problem_is_the_tasks_fault_not_the_submissions(tmp_path: Path) -> None:
    backend = backend_or_skip("bwrap")
    src = (ATTACKS / "patch_judge_check.py").read_text().replace(
        "        return torch.relu(x)", "        import os\n        os._exit(3)")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "crash.py").write_text(src)
    p = kgrader("task", "import", "kernelbench", tmp_path / "src" / "crash.py", "--out", tmp_path,
                "--policy", "default", "--no-verify")
    assert p.returncode == 0, p.stderr
    rc, r, _ = grade(tmp_path / "kb_crash", NOTHING, backend)
    assert rc == 2 and r["ok"] is False
    e = r["errors"][0]
    assert (e["code"], e["origin"]) == ("reference_failed", "infrastructure"), e
    assert "exited with status 3" in e["message"]


@pytest.mark.bwrap
def test_a_hanging_problem_is_the_tasks_fault_within_the_stage_budget(tmp_path: Path) -> None:
    backend = backend_or_skip("bwrap")
    src = (ATTACKS / "patch_judge_check.py").read_text().replace(
        "        return torch.relu(x)", "        import time\n        time.sleep(3600)")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "hang.py").write_text(src)
    p = kgrader("task", "import", "kernelbench", tmp_path / "src" / "hang.py", "--out", tmp_path,
                "--policy", "default", "--no-verify")
    assert p.returncode == 0, p.stderr
    rc, r, _ = grade(tmp_path / "kb_hang", NOTHING, backend, "--compile-s", "20", "--run-s", "20")
    assert rc == 2 and r["ok"] is False
    e = r["errors"][0]
    assert (e["code"], e["origin"]) == ("reference_failed", "infrastructure"), e
    assert "no answer" in e["message"]


@pytest.mark.bwrap
def test_a_checker_that_fails_on_the_outputs_fails_the_submission(tmp_path: Path) -> None:
    """GPU MODE's check_implementation runs in the problem process on the outputs the
    judge hands it; when it raises on them, the outputs provoked it: check_failed."""
    backend = backend_or_skip("bwrap")
    gm = ROOT / "examples" / "field" / "gpumode"
    shutil.copytree(gm / "vectoradd", tmp_path / "set" / "vectoradd")
    shutil.copy(gm / "utils.py", tmp_path / "set" / "utils.py")
    ref = tmp_path / "set" / "vectoradd" / "reference.py"
    ref.write_text(ref.read_text() + "\n\ndef check_implementation(data, output):\n"
                   "    raise ValueError('checker broke on ' + str(tuple(output.shape)))\n")
    p = kgrader("task", "import", "gpumode", tmp_path / "set" / "vectoradd", "--out",
                tmp_path / "out", "--no-verify")
    assert p.returncode == 0, p.stderr
    rc, r, _ = grade(tmp_path / "out" / "gm_vectoradd",
                     gm / "vectoradd" / "submissions" / "good.py", backend)
    assert rc == 1 and r["ok"] is False
    e = r["errors"][0]
    assert (e["stage"], e["code"], e["origin"]) == ("correctness", "check_failed", "candidate"), e
    assert "checker broke on" in e["message"]
