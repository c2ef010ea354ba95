"""A judge or a runner killed from outside its sandbox is the infrastructure's fault, not the
candidate's.

Real ``kgrader run`` processes on bwrap and docker, a candidate that sleeps in its import
(so the judge waits on its runner), and a signal sent to the judge from the host, as an
operator's ``kill`` or a daemon's shutdown would: the report says ``judge_killed``, origin
``infrastructure``, exit 2 (retried by every caller), never the candidate's ``judge_died``.
The candidate's own attempts at its judge stay the candidate's (tests/attacks/runtime,
``kill_judge.py``: refused, since runners run under other uids).

Likewise a runner SIGKILLed from the host mid-benchmark is ``runner_killed`` (stage
``benchmark``, infrastructure, exit 2), never the candidate's ``signal``: its seccomp filter
refuses every way of SIGKILLing itself (tests/attacks/runtime/self_sigkill_*.py).
"""

from __future__ import annotations

import contextlib
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
    out = []
    for p in _sandbox_processes(host_pid, backend):
        try:
            if JUDGE in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


def _sandbox_processes(host_pid: int, backend: str) -> list[psutil.Process]:
    """Every process of the sandbox of the run ``host_pid`` started (host pids)."""
    procs: list[psutil.Process] = []
    if backend == "bwrap":
        procs += psutil.Process(host_pid).children(recursive=True)
    else:
        from grader.backends.docker.prereqs import client

        for c in client().containers.list(filters={"label": "kgrader=1"}, ignore_removed=True):
            if (c.labels.get("kgrader.owner") or "").split(":")[1:2] == [str(host_pid)]:
                top = c.top(ps_args="-eo pid")
                for row in top.get("Processes") or []:
                    with contextlib.suppress(psutil.Error):
                        procs.append(psutil.Process(int(row[0])))
    return procs


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

        def found() -> bool:
            judges[:] = _judges(proc.pid, backend)
            return bool(judges)

        _wait("the judge", found, proc, timeout=60)
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
        for c in client().containers.list(filters={"label": "kgrader=1"}, ignore_removed=True):
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


# Right values from a Triton kernel; from the first call at the timed shape after the compile
# stage's one call and the correctness stage's eight (one tune shape and three hidden, two
# seeds each), it names itself for the test to find and sleeps in the benchmark's call.
SLEEPS_IN_BENCHMARK = """
import ctypes
import time

import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


_calls = [0]


def launch(x, y, out):
    n = out.numel()
    _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    _calls[0] += 1
    if _calls[0] > 9 and tuple(out.shape) == (64, 1024):
        ctypes.CDLL(None).prctl(15, b"kg-benchmark", 0, 0, 0)  # PR_SET_NAME of this thread
        time.sleep(600)
"""


def _named(host_pid: int, backend: str, name: str) -> list[psutil.Process]:
    """The sandbox's processes with a thread called ``name`` (read as root on the host: a
    runner is not dumpable, so its /proc files are root's)."""
    out = []
    for p in _sandbox_processes(host_pid, backend):
        with contextlib.suppress(OSError):
            tasks = Path(f"/proc/{p.pid}/task")
            if any((t / "comm").read_text().strip() == name for t in tasks.iterdir()):
                out.append(p)
    return out


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_runner_killed_from_outside_mid_benchmark_is_an_infrastructure_error(
        tmp_path: Path, backend: str) -> None:
    backend_or_skip(backend)
    tmpdir, _ = _sleepy(tmp_path)
    cand = tmp_path / "sleeps_in_benchmark.py"
    cand.write_text(SLEEPS_IN_BENCHMARK)
    proc = _start([*_run_args(cand, backend), "--json"], tmpdir)
    try:
        runners: list[psutil.Process] = []

        def found() -> bool:
            runners[:] = _named(proc.pid, backend, "kg-benchmark")
            return bool(runners)

        _wait("the runner to reach the benchmark", found, proc, timeout=600)
        (runner,) = runners
        assert runner.uids().real != 0 and runner.uids().real != psutil.Process(proc.pid).uids().real
        runner.send_signal(signal.SIGKILL)  # an operator's kill -9, a watchdog's
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err[-3000:]
    assert "Traceback" not in err
    report = json.loads(out)
    codes = [(e["stage"], e["code"], e["origin"]) for e in report["errors"]]
    assert codes == [("benchmark", "runner_killed", "infrastructure")], report["errors"]
    assert report["errors"][0]["detail"]["signal"] == signal.SIGKILL
    assert report["ok"] is False and report.get("timing") is None
    assert list(tmpdir.iterdir()) == []
    if backend == "docker":
        assert _containers(proc.pid) == []
