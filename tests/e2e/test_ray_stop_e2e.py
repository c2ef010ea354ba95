"""A Ray task that does not stop when cancelled still leaves nothing: on a real local Ray
cluster, :func:`grader.leaderboard.ray_stop.stop_tasks` force-kills its worker after the
wait and the node sweep removes the folder it marked (the path a starved node takes;
tests/e2e/test_clean_stops.py covers the cooperative one through ``leaderboard run``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.e2e._ray import quiet_env

ROOT = Path(__file__).resolve().parents[2]

DRIVER = """
import json, os, sys, tempfile, time
from pathlib import Path
import ray
from grader.leaderboard import ray_stop
from tests.e2e._ray import patient_node_start

ray_stop.CANCEL_WAIT_S = 3.0  # the stubborn task never settles by itself
patient_node_start()  # a loaded host's raylet may register after Ray's 30 s
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
         _node_ip_address="127.0.0.1")  # loopback only, not this host's other address

def stubborn():
    d = Path(tempfile.mkdtemp(prefix="kgrader-eval-"))
    from grader.backends.cleanup import mark_owner
    mark_owner(d)
    (d / "in").mkdir()
    (d / "in" / "candidate.py").write_text("# a submission's source")
    while True:  # ignores the cooperative cancel's KeyboardInterrupt
        try:
            time.sleep(60)
        except KeyboardInterrupt:
            pass

group = ray_stop.new_group()
ref = ray.remote(num_cpus=1, max_retries=0)(ray_stop.on_node).remote(group, stubborn)
base = Path(os.environ["TMPDIR"])
deadline = time.monotonic() + 120
while not list(base.glob("kgrader-eval-*/in/candidate.py")) and time.monotonic() < deadline:
    time.sleep(0.2)
made = [p.parent.parent.name for p in base.glob("kgrader-eval-*/in/candidate.py")]
t0 = time.monotonic()
report = ray_stop.stop_tasks(ray, [ref], group)
print(json.dumps({"made": made, "report": report.__dict__, "stop_s": time.monotonic() - t0,
                  "left": [p.name for p in base.glob("kgrader-eval-*")]}))
"""


@pytest.mark.slow
def test_a_task_that_ignores_its_cancel_is_killed_and_its_folder_swept() -> None:
    pytest.importorskip("ray")
    tmpdir = Path(tempfile.mkdtemp(prefix="kgrs-", dir="/tmp"))  # Ray's socket paths: short
    env = {**quiet_env(), "TMPDIR": str(tmpdir), "PYTHONPATH": str(ROOT),
           "RAY_AUTH_MODE": "disabled"}
    try:
        r = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True,
                           env=env, timeout=400, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-3000:]
        got = json.loads(r.stdout.strip().splitlines()[-1])
        assert len(got["made"]) == 1, got
        rep = got["report"]
        assert rep["cancelled"] == 1 and rep["forced"] == 1, got
        assert rep["swept"] >= 1 and rep["left"] == 0, got
        assert got["left"] == [], got
        assert got["stop_s"] < 3.0 + 10.0 + 20.0 + 10.0, got  # bounded (ray_stop.STOP_BOUND_S)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
