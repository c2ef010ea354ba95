"""GPU MODE problems graded as GPU MODE grades them, end to end (real bubblewrap, torch on
the CPU, Triton's interpreter): replicas of the pmpp problems (examples/field/gpumode/
prefixsum, histogram, vectoradd_out) imported with `kgrader task import gpumode`, their
correct solutions passing and their wrong ones failing under `kgrader run`.

What they pin: output buffers handed in the data are found by the reference's behaviour
(``torch.empty(...).contiguous()`` written by the reference; prefixsum's buffer, which its
reference never reads), writes to real inputs stay ``input_mutated``, the problem's own
check_implementation decides values and dtypes (a float32 scan against a float64
reference, within its sqrt(n)-scaled tolerance) unless the task is strict, and a problem
whose generator needs CUDA fails on the CPU as the infrastructure's, with the hint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from .conftest import SANDBOX, kgrader
from .test_field_tasks import GM, grade, grade_honest, quick

pytestmark = pytest.mark.bwrap
PMPP = ["histogram", "prefixsum", "vectoradd_out"]


@pytest.fixture(scope="module")
def pmpp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pmpp")
    for name in PMPP:
        p = kgrader("task", "import", "gpumode", GM / name, "--out", out, *SANDBOX)
        assert p.returncode == 0, p.stderr
        assert "found by behaviour" in p.stdout and "check_implementation decides" in p.stdout
        quick(out / f"gm_{name}")
    return out


def run(pmpp: Path, problem: str, kind: str, task: Path | None = None) -> tuple[int, dict[str, Any]]:
    how = grade_honest if kind == "good" else grade
    return how(task or pmpp / f"gm_{problem}", GM / problem / "submissions" / f"{kind}.py")


@pytest.mark.parametrize("problem,buffer,how", [
    ("vectoradd_out", "in2", "output buffer (written by the reference)"),
    ("histogram", "in1", "output buffer (written by the reference)"),
    ("prefixsum", "in1", "output buffer (not read by the reference)"),
])
def test_a_correct_pmpp_solution_writing_its_output_buffer_passes(pmpp: Path, problem: str,
                                                                 buffer: str, how: str) -> None:
    rc, r = run(pmpp, problem, "good")
    assert rc == 0 and r["ok"] is True and r["errors"] == [], r["errors"]
    assert r["correctness"]["checks"] == 9 and r["timing"]["median_ms"] > 0
    assert any(f"{buffer}: {how}" in w for w in r["warnings"]), r["warnings"]
    assert any("in0: input (read by the reference)" in w for w in r["warnings"])
    assert any(w.startswith("gpumode: check_implementation decides") for w in r["warnings"])


@pytest.mark.parametrize("problem,kind,stage,code", [
    ("vectoradd_out", "wrong", "correctness", "wrong_values"),
    # a real input stays read-only (the compile stage's first call already checks inputs)
    ("vectoradd_out", "mutates_input", "compile", "input_mutated"),
    ("histogram", "wrong", "correctness", "wrong_values"),
    ("prefixsum", "wrong", "correctness", "wrong_values"),
])
def test_a_wrong_pmpp_solution_fails_as_the_candidates(pmpp: Path, problem: str, kind: str,
                                                      stage: str, code: str) -> None:
    rc, r = run(pmpp, problem, kind)
    assert rc == 1 and r["ok"] is False
    err = r["errors"][0]
    assert (err["stage"], err["code"], err["origin"]) == (stage, code, "candidate"), err
    if code == "wrong_values":
        assert "check_implementation rejected" in err["message"]


def test_strict_adds_kgraders_dtype_check_and_says_so(pmpp: Path, tmp_path: Path) -> None:
    """problem.strict: the float32 scan fails kgrader's dtype check against the float64
    reference, which GPU MODE's own check passes (the default above)."""
    task = tmp_path / "strict"
    shutil.copytree(pmpp / "gm_prefixsum", task)
    spec = json.loads((task / "task.json").read_text())
    spec["problem"]["strict"] = True
    (task / "task.json").write_text(json.dumps(spec))
    rc, r = run(pmpp, "prefixsum", "good", task)
    assert rc == 1 and r["errors"][0]["code"] == "output_shape_mismatch", r["errors"]
    assert "float64" in r["errors"][0]["message"]
    assert any(w.startswith("gpumode strict:") for w in r["warnings"]), r["warnings"]


def test_a_generator_that_needs_cuda_fails_on_the_cpu_with_the_hint(tmp_path: Path) -> None:
    prob = tmp_path / "set" / "cudagen"
    prob.mkdir(parents=True)
    shutil.copy(GM / "utils.py", tmp_path / "set" / "utils.py")
    shutil.copy(GM / "vectoradd_out" / "task.yml", prob / "task.yml")
    ref = (GM / "vectoradd_out" / "reference.py").read_text()
    (prob / "reference.py").write_text(ref.replace("device=device()", 'device="cuda"'))
    p = kgrader("task", "import", "gpumode", prob, "--out", tmp_path / "out", *SANDBOX)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "needs a CUDA device" in p.stderr and "--device cuda" in p.stderr
    p = kgrader("task", "import", "gpumode", prob, "--out", tmp_path / "out", "--no-verify")
    assert p.returncode == 0, p.stderr
    rc, r = grade(tmp_path / "out" / "gm_cudagen", GM / "vectoradd_out" / "submissions" / "good.py")
    assert rc == 2 and r["ok"] is False
    err = r["errors"][0]
    assert (err["code"], err["origin"]) == ("needs_cuda", "infrastructure"), err
    assert "--device cuda" in err["message"]


def test_a_checker_that_needs_cuda_on_the_cpu_is_not_blamed_on_the_submission(tmp_path: Path
                                                                              ) -> None:
    prob = tmp_path / "set" / "cudacheck"
    shutil.copytree(GM / "vectoradd_out", prob)
    shutil.copy(GM / "utils.py", tmp_path / "set" / "utils.py")
    ref = prob / "reference.py"
    ref.write_text(ref.read_text() + "\n\ndef check_implementation(data, output):\n"
                   "    return bool((output.to('cuda') == output.to('cuda')).all()), ''\n")
    p = kgrader("task", "import", "gpumode", prob, "--out", tmp_path / "out", "--no-verify")
    assert p.returncode == 0, p.stderr
    rc, r = grade(tmp_path / "out" / "gm_cudacheck", GM / "vectoradd_out" / "submissions" / "good.py")
    assert rc == 2 and r["ok"] is False
    err = r["errors"][0]
    assert (err["code"], err["origin"]) == ("needs_cuda", "infrastructure"), err
