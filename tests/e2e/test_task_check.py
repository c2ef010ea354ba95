"""`kgrader task new`, `kgrader task check` and generated shape sets, end to end (real
bubblewrap: the reference runs in the judge's check mode, never on the host)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .conftest import SANDBOX
from .conftest import kgrader as run_kgrader

ROOT = Path(__file__).resolve().parents[2]
FIELD = ROOT / "examples" / "field"

pytestmark = pytest.mark.bwrap

# Its grid and mask come from the one size it was tuned on, not from its tensors.
HARDCODED = '''"""Hard-codes N = 65536: right at that size, wrong at any other."""

import torch
import triton
import triton.language as tl

N = 65536
BLOCK = 1024


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    add_kernel[(triton.cdiv(N, BLOCK),)](x, y, out, N, BLOCK=BLOCK)
'''


def kgrader(*args: str | Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return run_kgrader(*args, timeout=timeout, no_traceback=True)


def new_task(tmp: Path, name: str = "demo") -> Path:
    p = kgrader("task", "new", name, "--out", tmp)
    assert p.returncode == 0, p.stderr
    return tmp / name


def edit(task: Path, **changes: Any) -> None:
    spec = json.loads((task / "task.json").read_text())
    spec.update(changes)
    (task / "task.json").write_text(json.dumps(spec))


def check(task: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    p = kgrader("task", "check", task, "--json", *extra, *SANDBOX)
    return p.returncode, json.loads(p.stdout) if p.stdout else {}


def failing(report: dict[str, Any]) -> set[str]:
    return {f["what"] for f in report["findings"] if not f["ok"]}


def run(task: Path, candidate: Path) -> tuple[int, dict[str, Any]]:
    p = kgrader("run", task, candidate, *SANDBOX, "--json")
    return p.returncode, json.loads(p.stdout)


def test_a_new_task_is_sound_and_its_good_candidate_passes_on_drawn_shapes(tmp_path: Path) -> None:
    task = new_task(tmp_path)
    assert {p.name for p in task.iterdir()} == {"task.json", "reference.py", "candidates"}
    p = kgrader("task", "check", task, *SANDBOX)
    assert p.returncode == 0 and p.stdout.rstrip().endswith("sound"), p.stdout + p.stderr
    assert "drawn hidden" in p.stdout and "(N=zero)" in p.stdout and "FAIL" not in p.stdout
    rc, r = run(task, task / "candidates" / "good.py")
    assert rc == 0 and r["ok"], r["errors"]
    shapes = r["shapes"]
    assert shapes["seed"] == "secret" and shapes["timed"] == {"N": 65536}
    assert {"N": 0} in shapes["hidden"] and {"N": 1} in shapes["hidden"]
    assert shapes["hidden_probes"][0] == "larger than every tune shape"
    assert shapes["hidden"][0]["N"] > 65536  # beyond the timed shape too
    checked = r["correctness"]["shapes_checked"]
    assert checked == shapes["tune"] + shapes["hidden"]


def test_the_same_seed_draws_the_same_shapes_in_task_check(tmp_path: Path) -> None:
    task = new_task(tmp_path)
    a, b = check(task, "--seed", "5")[1], check(task, "--seed", "5")[1]
    assert a["drawn"] == b["drawn"] and a["ok"]


def test_a_hardcoded_size_passes_the_fixed_task_and_fails_the_generated_one(tmp_path: Path) -> None:
    cand = tmp_path / "hardcoded.py"
    cand.write_text(HARDCODED)
    fixed = new_task(tmp_path, "fixed")
    edit(fixed, shapes={"tune": [{"N": 65536}]})
    rc, r = run(fixed, cand)
    assert rc == 0 and r["ok"] and r["shapes"] is None
    generated = new_task(tmp_path, "generated")
    rc, r = run(generated, cand)
    # the first call already runs on a drawn tune shape (the compile stage's launch)
    assert rc == 1 and r["stage"] in ("compile", "correctness")
    err = r["errors"][0]
    # smaller than N: it writes past its tensors; larger: it leaves the tail unwritten
    assert err["code"] in ("out_of_bounds_write", "output_untouched"), err
    assert err["origin"] == "candidate"


def test_tolerances_tighter_than_the_dtype_allows_are_found(tmp_path: Path) -> None:
    task = new_task(tmp_path)
    spec = json.loads((task / "task.json").read_text())
    for t in spec["tensors"]:
        t["dtype"] = "float16"
    spec["correctness"].update(atol=1e-6, rtol=1e-6)
    (task / "task.json").write_text(json.dumps(spec))
    rc, rep = check(task)
    assert rc == 1 and not rep["ok"]
    assert failing(rep) == {"tolerances hold against float64"}


def test_a_nondeterministic_reference_is_found(tmp_path: Path) -> None:
    task = new_task(tmp_path)
    (task / "reference.py").write_text(
        "import torch\n\ndef launch(x, y, out):\n"
        "    torch.add(x, y, out=out)\n    out.add_(torch.rand_like(out) * 1e-3)\n")
    rc, rep = check(task)
    assert rc == 1 and "the reference is deterministic" in failing(rep)


def test_a_cost_model_that_fails_on_a_drawn_shape_is_found(tmp_path: Path) -> None:
    task = new_task(tmp_path)
    edit(task, cost_model={"bytes": "12*N", "flops": "N*log2(N)"})  # log2(0): N may be 0
    rc, rep = check(task)
    assert rc == 1 and failing(rep) == {"cost model evaluates"}


def test_shapes_beyond_the_memory_limit_are_found_without_running_them(tmp_path: Path) -> None:
    task = new_task(tmp_path)
    spec = json.loads((task / "task.json").read_text())
    spec["shapes"]["generate"]["dims"]["N"]["max"] = 1 << 28
    spec["limits"]["memory_mib"] = 512
    (task / "task.json").write_text(json.dumps(spec))
    rc, rep = check(task)
    assert rc == 1 and "every shape fits the memory limit" in failing(rep)
    assert rep["shapes"] == []  # the reference never ran on shapes that cannot fit


def test_a_broken_reference_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    task = new_task(tmp_path)
    (task / "reference.py").write_text("def launch(x, y, out):\n    raise ValueError('nope')\n")
    rc, rep = check(task)
    assert rc == 1 and "the reference runs" in failing(rep)


@pytest.mark.parametrize("problem", ["kernelbench/problems/5_Linear_GELU.py", "gpumode/linear"])
def test_imported_field_tasks_check_sound(tmp_path: Path, problem: str) -> None:
    fmt = problem.split("/")[0]
    p = kgrader("task", "import", fmt, FIELD / problem, "--out", tmp_path, "--no-verify")
    assert p.returncode == 0, p.stderr
    (folder,) = tmp_path.iterdir()
    rc, rep = check(folder)
    assert rc == 0 and rep["ok"], rep["findings"]
    assert all("float64" in s for s in rep["shapes"])


def test_unusable_input_exits_2(tmp_path: Path) -> None:
    p = kgrader("task", "check", tmp_path / "missing", *SANDBOX)
    assert p.returncode == 2 and p.stderr.startswith("error:")
    p = kgrader("task", "new", "not-an-identifier", "--out", tmp_path)
    assert p.returncode == 2 and "must be an identifier" in p.stderr
    new_task(tmp_path)
    p = kgrader("task", "new", "demo", "--out", tmp_path)
    assert p.returncode == 2 and "exists" in p.stderr
