"""A benchmark stage whose declared calls cannot fit in its run_s ends with the calls it has
and a time, never a timeout of an honest kernel: real bubblewrap, the vector_add_small kernel
under the Triton interpreter (tens of ms a call), 2,000 declared calls in a 12 s stage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grader.evaluate import EvalRequest, evaluate

from ._backends import backend_or_skip

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "vector_add_small"
GOOD = TASK / "candidates" / "good.py"

pytestmark = [pytest.mark.bwrap, pytest.mark.skipif(shutil.which("bwrap") is None,
                                                    reason="bubblewrap is not installed")]


def test_a_benchmark_out_of_budget_gives_a_time_on_fewer_samples(tmp_path: Path) -> None:
    task = tmp_path / "task"
    shutil.copytree(TASK, task)
    spec = json.loads((task / "task.json").read_text())
    spec["benchmark"].update(samples=400, reps=5)
    (task / "task.json").write_text(json.dumps(spec))
    report = evaluate(EvalRequest.from_paths(task_dir=task, candidate=GOOD,
                                             backend=backend_or_skip("bwrap"), device="cpu",
                                             limits={"run_s": 12}))
    assert report.errors == [], report.errors
    assert report.ok and report.stage == "benchmark" and report.timing is not None
    t = report.timing
    assert t.requested_calls == 2000 and 10 <= t.samples < 2000, (t.samples, t.requested_calls)
    assert any(f"timed {t.samples} of the 2000 calls" in w for w in report.warnings), report.warnings
