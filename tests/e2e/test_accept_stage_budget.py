"""An acceptance whose next planned look cannot fit in the stage's run_s stops at the look
it took and gives a verdict (not accepted, no error), never a timeout of an honest kernel:
real bubblewrap, the vector_add_small kernel against itself, looks of 10 and 100,000 pairs (no machine fits the second in run_s)."""

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


def test_a_deciding_run_out_of_time_stops_at_its_look_with_a_verdict(tmp_path: Path) -> None:
    task = tmp_path / "task"
    shutil.copytree(TASK, task)
    spec = json.loads((task / "task.json").read_text())
    # alpha 1e-4 over two looks: 10 pairs give the sign test no bound at its share (5e-5),
    # so the look at 10 can only say "continue" and the stage's clock decides the stop. At
    # alpha 0.01 the live rule (the runners' clocks) sometimes rejected by futility at 10 in
    # this A/A: a verdict too, but with no stop to see (1 of 10 runs, 2026-12-05).
    spec["acceptance"].update(looks=[10, 100000], pairs=5, min_pairs=5, alpha=1e-4)
    (task / "task.json").write_text(json.dumps(spec))
    report = evaluate(EvalRequest.from_paths(task_dir=task, candidate=GOOD, current=GOOD,
                                             backend=backend_or_skip("bwrap"), device="cpu",
                                             limits={"run_s": 120}))
    assert report.errors == [], report.errors
    assert report.stage == "accept" and report.acceptance is not None
    assert report.acceptance.accepted is False and report.acceptance.pairs == 10
    assert any("stopped at its look of 10 pairs" in w for w in report.warnings), report.warnings
