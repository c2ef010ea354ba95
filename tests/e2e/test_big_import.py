"""Imports of big and quirky field problems, end to end (real bubblewrap, torch on the CPU):
a problem that does not fit says which limit and what figure; one that fits verifies and
keeps its limits; every quirk is named with what kgrader does; a problem that needs CUDA
says so on a CPU, as the device's fault."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "field"
BIG = DATA / "kernelbench_big" / "1_Big_ReLU.py"  # 288 MiB of input, 576 MiB of tensors
SANDBOX = ("--backend", "bwrap", "--device", "cpu")

pytestmark = [pytest.mark.bwrap, pytest.mark.skipif(shutil.which("bwrap") is None,
                                                    reason="bubblewrap is not installed")]


def kgrader(*args: str | Path, timeout: float = 1100) -> tuple[int, dict[str, Any], str]:
    p = subprocess.run([sys.executable, "-m", "grader.cli", *map(str, args), "--json"],
                       capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout), p.stderr


def test_a_check_the_memory_limit_kills_names_the_limit_and_its_figure(tmp_path: Path) -> None:
    code, doc, err = kgrader("task", "import", "kernelbench", BIG, "--out", tmp_path,
                             "--memory-mib", "256", *SANDBOX)
    assert code == 2 and doc["ok"] is False and not list(tmp_path.iterdir())
    error = doc["failed"][0]["error"]
    assert error["code"] == "check_limit" and error["origin"] == "usage"
    assert "memory limit 256 MiB" in error["message"], error
    assert "--memory-mib" in error["hint"]
    assert "result_missing" not in err


def test_a_shape_beyond_the_memory_limit_is_refused_with_what_it_needs(tmp_path: Path) -> None:
    # torch starts within 1536 MiB, the problem's 576 MiB of tensors held 3 times do not:
    # the judge refuses the shape with its figures instead of running into the limit
    code, doc, _ = kgrader("task", "import", "kernelbench", BIG, "--out", tmp_path,
                           "--memory-mib", "1536", *SANDBOX)
    assert code == 2
    error = doc["failed"][0]["error"]
    assert error["code"] == "check_limit"
    assert "memory limit 1536 MiB" in error["message"] and "576.2 MiB" in error["message"]
    assert "--memory-mib 2753 or more" in error["hint"]  # 1729 MiB of copies + 1024


@pytest.mark.slow
def test_with_a_generous_limit_the_big_problem_verifies_and_keeps_its_limits(
        tmp_path: Path) -> None:
    code, doc, err = kgrader("task", "import", "kernelbench", BIG, "--out", tmp_path,
                             "--memory-mib", "6144", *SANDBOX, timeout=1150)
    assert code == 0, (doc, err)
    task = doc["imported"][0]
    spec = json.loads((Path(task["folder"]) / "task.json").read_text())
    # the figures a later check or run needs: the memory, and a largest-file limit the
    # judge's 576 MiB shared buffer fits (it failed "File too large" under the default)
    assert spec["limits"]["memory_mib"] == 6144 and spec["limits"]["tmpfs_mib"] >= 1153
    assert "verified-cpu" in spec["tags"]
    assert {q["code"] for q in task["quirks"]} >= {"size_product", "big_buffer"}
    assert spec["shapes"]["hidden"], "batch_size = 1024 * 18 is a size hidden shapes vary"


def test_quirks_are_named_at_import_each_with_what_kgrader_does(tmp_path: Path) -> None:
    code, doc, err = kgrader("task", "import", "kernelbench", DATA / "kernelbench", "--out",
                             tmp_path, *SANDBOX)
    assert code == 0, (doc, err)
    found = {t["task"]: {q["code"]: q for q in t["quirks"]} for t in doc["imported"]}
    drop = found["kb_10_linear_batchnorm_dropout_scale"]
    # static (the source) and measured (the sandbox) agree on the live Dropout
    assert {"size_product", "live_dropout", "train_batchnorm", "rng_dependent",
            "non_tensor_inputs"} <= set(drop)
    assert drop["rng_dependent"]["source"] == "measured"
    half = found["kb_11_matmul_softmax_tiny_half"]
    assert {"half_precision", "tolerance_above_magnitude"} <= set(half)
    assert "atol=0.01" in half["tolerance_above_magnitude"]["found"]  # float16's own
    assert "zero_output" in found["kb_12_conv_min_clamp_zero"]
    for quirks in found.values():
        assert all(q["action"] for q in quirks.values())
    # and again, from the task folder alone, by task check (human output)
    folder = tmp_path / "kb_11_matmul_softmax_tiny_half"
    p = subprocess.run([sys.executable, "-m", "grader.cli", "task", "check", str(folder),
                        *SANDBOX], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "quirk half_precision: outputs in float16" in p.stdout
    assert "float16 outputs against the float64 values rounded to their dtype" in p.stdout
    assert "beyond atol" not in p.stdout


def test_a_gpumode_problem_that_needs_cuda_says_so_on_a_cpu(tmp_path: Path) -> None:
    problem = DATA / "gpumode" / "cuda_only"
    code, doc, _ = kgrader("task", "import", "gpumode", problem, "--out", tmp_path, *SANDBOX)
    assert code == 2
    error = doc["failed"][0]["error"]
    assert error["code"] == "needs_device" and error["origin"] == "infrastructure", error
    assert "Cannot get CUDA generator" in error["message"] or "CUDA" in error["message"]
    assert "--device cuda" in error["hint"]
    # imported without the check, the task's own check says the same
    code, doc, _ = kgrader("task", "import", "gpumode", problem, "--out", tmp_path,
                           "--no-verify")
    assert code == 0
    code, doc, _ = kgrader("task", "check", doc["imported"][0]["folder"], *SANDBOX)
    assert code == 2 and doc["error"]["code"] == "needs_device"
    assert doc["error"]["origin"] == "infrastructure" and "--device cuda" in doc["error"]["hint"]
