"""The judge's calibrate mode through the real sandbox (bwrap, CPU): one pair of runners per
scenario, or a fresh pair per decision (``fresh_runners``) until the sandbox's runner uids
run out, and bench/calibration.py's host loop that goes on in a new sandbox."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from grader.judgecall import mode_request, run_judge_mode
from grader.limits import Limits
from grader.task import load_task
from sandbox.contract.wire import CalibrateWire, Record
from sandbox.launcher.identity import RUNNER_IDS
from tests.e2e._backends import backend_or_skip

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "vector_add_small"
GOOD = (TASK / "candidates" / "good.py").read_text()
LIMITS = Limits(compile_s=60, run_s=200, memory_mib=4096)

pytestmark = pytest.mark.bwrap


def _scenario(decisions: int, fresh: bool) -> dict[str, object]:
    return {"name": "aa", "current": "/kg/in/a.py", "candidate": "/kg/in/b.py",
            "decisions": decisions, "pairs": 3, "fresh_runners": fresh, "reserve_s": 5}


def _calibrate(decisions: int, fresh: bool, limits: Limits = LIMITS) -> Record:
    spec, ref = load_task(TASK)
    req = mode_request("calibrate", "cpu", task=spec.to_wire(), reference=ref, candidate="/kg/in/b.py",
                       calibrate=CalibrateWire(scenarios=(_scenario(decisions, fresh),),
                                               decisions=decisions, pairs=3))
    return run_judge_mode(req, {"a.py": GOOD, "b.py": GOOD}, backend=backend_or_skip("bwrap"),
                          limits=limits)


def _runners(rec: Record) -> set[int]:
    return {int(m.group(1)) for k in rec.phases for m in [re.fullmatch(r"runner(\d+)_ready", k)] if m}


def _check(decisions: list[dict[str, list[float]]], n: int) -> None:
    assert len(decisions) == n
    for d in decisions:
        assert len(d["t_cur"]) == len(d["t_cand"]) == 3
        assert all(t > 0 for t in (*d["t_cur"], *d["t_cand"]))
        assert d["empty_cur"] >= 0 and d["empty_cand"] >= 0  # the runners' empty calls


def test_one_pair_of_runners_serves_every_decision_by_default() -> None:
    rec = _calibrate(3, fresh=False)
    assert not rec.errors, rec.errors
    _check(rec.calibration["aa"]["decisions"], 3)
    assert _runners(rec) == {1, 2}


def test_fresh_runners_open_a_pair_per_decision_until_the_uids_run_out() -> None:
    # 30 torch imports in turn: on a loaded 2-core host that outlasts LIMITS' run_s (the bench
    # then stops early, "the run's time is used up"); this test is about the uids
    rec = _calibrate(len(RUNNER_IDS), fresh=True, limits=Limits(compile_s=60, run_s=1500, memory_mib=4096))
    assert not rec.errors, rec.errors
    out = rec.calibration["aa"]
    # uids are never reused: of 32, the task's problem process holds one, 31 make 15 pairs
    pairs = (len(RUNNER_IDS) - 1) // 2
    _check(out["decisions"], pairs)
    assert out["stopped"] == "runner uids of this sandbox used up"
    assert _runners(rec) == set(range(1, 2 * pairs + 1))


def test_the_bench_goes_on_in_a_new_sandbox_when_a_sandbox_has_no_uids_left() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from calibration import decide

    spec, ref = load_task(TASK)
    wanted = len(RUNNER_IDS) // 2 + 2
    # 36 torch imports in turn: budgets a loaded 2-core host can meet (idle, ~2 minutes)
    sc = [{**_scenario(wanted, True), "budget_s": 1400.0}]
    cal, errors, sandboxes = decide(sc, {"a.py": GOOD, "b.py": GOOD}, spec, ref, device="cpu",
                                    backend=backend_or_skip("bwrap"), fresh=True, budget_s=1500.0)
    assert not errors, errors
    assert sandboxes == 2
    _check(cal["aa"]["decisions"], wanted)
