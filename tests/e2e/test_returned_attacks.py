"""Returned-output contracts (KernelBench): no candidate code runs between the timed call
and the judge's check. Imported with `kgrader task import`, graded through `kgrader run`
on bwrap with the scan off (tests/policies/runtime-only.toml), real torch and Triton."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import SANDBOX, kgrader

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "examples" / "field" / "kernelbench" / "problems" / "1_ReLU.py"
ATTACKS = ROOT / "tests" / "attacks" / "returned"
GOOD = ROOT / "examples" / "field" / "kernelbench" / "submissions" / "1_ReLU" / "good.py"

pytestmark = pytest.mark.bwrap


@pytest.fixture(scope="module")
def relu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("kb")
    p = kgrader("task", "import", "kernelbench", PROBLEM, "--out", out, *SANDBOX)
    assert p.returncode == 0, p.stderr
    (task,) = list(out.iterdir())
    spec = json.loads((task / "task.json").read_text())
    spec["benchmark"] = {"warmup": 1, "samples": 3, "reps": 2}
    (task / "task.json").write_text(json.dumps(spec))
    return task


def grade(task: Path, candidate: Path) -> tuple[int, dict[str, object]]:
    p = kgrader("run", task, candidate, *SANDBOX, "--json", "--policy",
                ROOT / "tests" / "policies" / "runtime-only.toml")
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout)


@pytest.mark.parametrize("name", sorted(p.name for p in ATTACKS.glob("*.py")))
def test_work_deferred_past_the_timed_call_fails(relu: Path, name: str) -> None:
    rc, r = grade(relu, ATTACKS / name)
    assert rc == 1 and r["ok"] is False, r
    err = r["errors"][0]  # type: ignore[index]
    assert err["origin"] == "candidate", err  # type: ignore[index]
    assert err["code"] in {"output_shape_mismatch", "mode_left_active", "output_untouched",  # type: ignore[index]
                           "wrong_values"}, err


def test_the_correct_submission_still_passes(relu: Path) -> None:
    rc, r = grade(relu, GOOD)
    assert rc == 0 and r["ok"] is True, r
