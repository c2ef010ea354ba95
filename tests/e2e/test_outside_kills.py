"""A judge killed from outside its sandbox is the infrastructure's fault, not the candidate's.

Real ``kgrader run`` processes on bwrap and docker, a candidate that sleeps in its import
(so the judge waits on its runner), and a signal sent to the judge from the host, as an
operator's ``kill`` or a daemon's shutdown would: the report says ``judge_killed``, origin
``infrastructure``, exit 2 (retried by every caller), never the candidate's ``judge_died``.
The candidate's own attempts at its judge stay the candidate's (tests/attacks/runtime,
``kill_judge.py``: refused, since runners run under other uids).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import psutil
import pytest

from ._backends import backend_or_skip
from .test_clean_stops import _containers, _run_args, _sleepy, _start, _started, _wait

pytestmark = pytest.mark.bwrap
JUDGE = "sandbox.judge.main"


def _judges(host_pid: int, backend: str) -> list[psutil.Process]:
    """The judge processes of the run ``host_pid`` started (host pids)."""
    if backend == "bwrap":
        procs = psutil.Process(host_pid).children(recursive=True)
    else:
        from grader.backends.docker.prereqs import client

        procs = []
        for c in client().containers.list(filters={"label": "kgrader=1"}):
            if (c.labels.get("kgrader.owner") or "").split(":")[1:2] == [str(host_pid)]:
                top = c.top(ps_args="-eo pid")
                procs += [psutil.Process(int(row[0])) for row in top.get("Processes") or []]
    out = []
    for p in procs:
        try:
            if JUDGE in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


@pytest.mark.parametrize(("backend", "sig"), [("bwrap", signal.SIGKILL), ("bwrap", signal.SIGTERM),
                                              ("docker", signal.SIGKILL)])
def test_judge_killed_from_outside_is_an_infrastructure_error(
        tmp_path: Path, backend: str, sig: signal.Signals) -> None:
    backend_or_skip(backend)
    tmpdir, cand = _sleepy(tmp_path)
    proc = _start([*_run_args(cand, backend), "--json"], tmpdir)
    try:
        _wait("the sandbox to run", lambda: bool(_started(tmpdir, proc.pid)), proc)
        judges: list[psutil.Process] = []
        _wait("the judge", lambda: bool(judges.extend(_judges(proc.pid, backend)) or judges), proc,
              timeout=60)
        time.sleep(2)  # the runner sleeps in its import; the judge waits on it
        for j in judges:
            j.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err[-3000:]
    assert "Traceback" not in err
    report = json.loads(out)
    codes = [(e["stage"], e["code"], e["origin"]) for e in report["errors"]]
    assert codes == [("sandbox", "judge_killed", "infrastructure")], report["errors"]
    assert sig.name in report["errors"][0]["message"]
    assert list(tmpdir.iterdir()) == []
    if backend == "docker":
        assert _containers(proc.pid) == []


def test_docker_stop_of_the_sandbox_is_an_infrastructure_error(tmp_path: Path) -> None:
    """``docker stop`` (what a daemon's shutdown does to each container): the container's
    init cannot forward SIGTERM to the judge, which runs under another uid, and ends the
    container with status 1; the host reads that as the outside kill it is."""
    backend_or_skip("docker")
    from grader.backends.docker.prereqs import client

    tmpdir, cand = _sleepy(tmp_path)
    proc = _start([*_run_args(cand, "docker"), "--json"], tmpdir)
    try:
        _wait("the sandbox to run", lambda: bool(_started(tmpdir, proc.pid)), proc)
        time.sleep(2)
        for c in client().containers.list(filters={"label": "kgrader=1"}):
            if (c.labels.get("kgrader.owner") or "").split(":")[1:2] == [str(proc.pid)]:
                c.stop(timeout=10)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err[-3000:]
    codes = [(e["code"], e["origin"]) for e in json.loads(out)["errors"]]
    assert codes == [("judge_killed", "infrastructure")], codes
    assert _containers(proc.pid) == [] and list(tmpdir.iterdir()) == []
