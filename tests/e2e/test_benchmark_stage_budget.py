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


def test_a_cancelled_evaluation_has_its_sandbox_killed(tmp_path: Path) -> None:
    """A cancelled service job's evaluation (``EvalRequest.cancel``): the sandbox is killed
    within a second of the cancel, not left to run out its 2,000 declared calls."""
    import threading
    import time

    import psutil

    task = tmp_path / "task"
    shutil.copytree(TASK, task)
    spec = json.loads((task / "task.json").read_text())
    spec["benchmark"].update(samples=400, reps=5)
    (task / "task.json").write_text(json.dumps(spec))
    cancel = threading.Event()
    req = EvalRequest.from_paths(task_dir=task, candidate=GOOD, backend=backend_or_skip("bwrap"),
                                 device="cpu", limits={"run_s": 60}, cancel=cancel)
    timer = threading.Timer(6.0, cancel.set)  # mid-benchmark: set-up and correctness take ~3 s
    timer.start()
    t0 = time.monotonic()
    report = evaluate(req)
    wall = time.monotonic() - t0
    timer.cancel()
    assert cancel.is_set() and wall < 6.0 + 3.0, wall  # killed at once, not after 60 s
    assert not report.ok
    me = psutil.Process()
    assert not [p for p in me.children(recursive=True) if "bwrap" in p.name()]
