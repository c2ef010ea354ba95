"""``kgrader replay row``: a recorded leaderboard row graded again (real bwrap, CPU) with the
state's secret seeds reproduces its verdict; another file or secret is refused (exit 2)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e._backends import backend_or_skip
from tests.e2e.conftest import retried

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "vector_add_small"
pytestmark = [pytest.mark.bwrap, pytest.mark.slow]


def _kg(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KGRADER_LEADERBOARD_SECRET"}
    return subprocess.run([sys.executable, "-m", "grader.cli", *args], capture_output=True,
                          text=True, timeout=600, cwd=ROOT, env=env)


def test_a_replayed_leaderboard_row_reproduces_its_verdict(tmp_path: Path) -> None:
    backend_or_skip("bwrap")
    subs = tmp_path / "subs"
    for name, cand in (("alice", "good.py"), ("bob", "wrong.py")):
        (subs / name).mkdir(parents=True)
        shutil.copy(TASK / "candidates" / cand, subs / name / f"{TASK.name}.py")
    secret = tmp_path / "secret"
    secret.write_text("s" * 40)
    state = tmp_path / "lb.sqlite"
    run = retried(lambda: _kg("leaderboard", "run", "--tasks", str(TASK), "--submissions", str(subs),
              "--state", str(state), "--seed-secret", str(secret), "--top-k", "0",
              "--workers", "1", "--device", "cpu", "--backend", "bwrap", "--no-progress"),
                  lambda r: r.returncode == 2, wait_s=10)  # a loaded host: resumed
    assert run.returncode == 0, run.stderr
    common = ("--state", str(state), "--seed-secret", str(secret), "--backend", "bwrap",
              "--device", "cpu", "--json")
    for name, verdict in (("alice", "ok"), ("bob", "failed")):
        r = _kg("replay", "row", "--submission", name, *common, str(TASK),
                str(subs / name / f"{TASK.name}.py"))
        assert r.returncode == 0, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        assert doc["holds"] is True
        assert doc["recorded"]["verdict"] == doc["replayed"]["verdict"] == verdict
        if verdict == "failed":
            assert doc["recorded"]["code"] == doc["replayed"]["code"]
    # not the recorded file: refused before anything is graded
    r = _kg("replay", "row", "--submission", "alice", *common, str(TASK),
            str(subs / "bob" / f"{TASK.name}.py"))
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["code"] == "replay_mismatch"
    # another secret would draw other seeds: refused
    other = tmp_path / "other"
    other.write_text("o" * 40)
    r = _kg("replay", "row", "--submission", "alice", "--state", str(state), "--seed-secret",
            str(other), "--json", str(TASK), str(subs / "alice" / f"{TASK.name}.py"))
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["code"] == "seed_secret_mismatch"
    # and a resumed run on another secret is refused, not graded on new seeds
    again = _kg("leaderboard", "run", "--tasks", str(TASK), "--submissions", str(subs),
                "--state", str(state), "--seed-secret", str(other), "--top-k", "0",
                "--device", "cpu", "--backend", "bwrap", "--no-progress")
    assert again.returncode == 2 and "seed" in again.stderr
