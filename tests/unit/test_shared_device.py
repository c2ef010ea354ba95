"""A GPU shared with another job: the host's NVML watch and what the report makes of it.

The watch runs against a fake NVML (this machine has no GPU) but real processes: the
sandbox's tree, a child of it, and an unrelated process. On an H200 the real one ran in
tests/e2e/test_gpu.py.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import types
from typing import Any

import pytest

from grader.backends.base import SandboxOutcome
from grader.backends.gpu_watch import GpuWatch
from grader.grading.shared_device import account_for_shared_device
from grader.report.model import AcceptanceResult, Report, ReportError

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _report(*errors: tuple[str, str, str], accepted: bool | None = None) -> Report:
    r = Report(ok=not errors, stage="benchmark",
               errors=[ReportError(stage=s, code=c, origin=o, message="m")  # type: ignore[arg-type]
                       for s, c, o in errors])
    if accepted is not None:
        r.acceptance = AcceptanceResult(accepted=accepted, rule="controlled", improvement_fraction=0.1,
                                        pairs=50, positive_fraction=0.9, reason="faster")
    return r


SHARED = SandboxOutcome(backend="bwrap", exit_code=0, signal=None, wall_s=1.0,
                        device_shared_by=("pid 4242 (python3)",), device_watched=True)


@pytest.mark.parametrize("code", ["timeout", "gpu_busy_between_calls", "work_escaped_timing",
                                  "current_timing_inconsistent", "below_roofline_floor"])
def test_a_timing_verdict_on_a_shared_device_is_the_infrastructures(code: str) -> None:
    r = _report(("benchmark", code, "candidate"))
    account_for_shared_device(r, SHARED)
    (e,) = r.errors
    assert (e.code, e.origin, e.detail["replaced"]) == ("foreign_gpu_process", "infrastructure", code)
    assert "pid 4242" in e.message and r.infrastructure_failed()


def test_correctness_and_integrity_verdicts_stand_on_a_shared_device() -> None:
    r = _report(("correctness", "wrong_values", "candidate"), ("integrity", "judge_died", "candidate"))
    account_for_shared_device(r, SHARED)
    assert [e.code for e in r.errors] == ["wrong_values", "judge_died"]


@pytest.mark.parametrize("accepted", [True, False])
def test_no_acceptance_is_decided_beside_another_job_and_a_pass_carries_a_warning(accepted: bool) -> None:
    r = _report(accepted=accepted)
    account_for_shared_device(r, SHARED)
    assert r.acceptance is not None and not r.acceptance.accepted
    assert r.acceptance.reason.startswith("not decided")
    assert [(e.stage, e.code, e.origin) for e in r.errors] == [("accept", "foreign_gpu_process",
                                                                 "infrastructure")]
    plain = _report()
    account_for_shared_device(plain, SHARED)
    assert not plain.errors and any("pid 4242" in w for w in plain.warnings)
    alone = _report(("benchmark", "timeout", "candidate"), accepted=True)
    account_for_shared_device(alone, SandboxOutcome(backend="bwrap", exit_code=0, signal=None, wall_s=1.0))
    assert alone.errors[0].code == "timeout" and alone.acceptance is not None and alone.acceptance.accepted


def _fake_nvml(pids: list[int]) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.nvmlInit = lambda: None  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)  # type: ignore[attr-defined]
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [  # type: ignore[attr-defined]
        types.SimpleNamespace(pid=p, usedGpuMemory=1 << 20) for p in pids]
    return m


def test_the_watch_names_a_live_process_outside_the_tree_only(monkeypatch: pytest.MonkeyPatch) -> None:
    root = subprocess.Popen([sys.executable, "-c",
                             "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
                             "'import time; time.sleep(60)']); time.sleep(60)"])
    other = subprocess.Popen(SLEEP)
    gone = subprocess.Popen(SLEEP)
    gone.kill()
    gone.wait()
    try:
        import psutil

        deadline = time.monotonic() + 20
        while not psutil.Process(root.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)
        (child,) = psutil.Process(root.pid).children()
        fake: dict[str, Any] = {"pids": [root.pid, child.pid, other.pid, gone.pid]}
        monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(fake["pids"]))
        w = GpuWatch(root.pid, ("0",), None, kill=lambda: None, interval=0.02)
        assert w.available
        w.start()
        time.sleep(0.3)
        w.stop()
        w.join(5)
        assert list(w.foreign) == [other.pid], w.foreign
        assert w.shared_by() == (f"pid {other.pid} (python3)",) or w.shared_by()[0].startswith(
            f"pid {other.pid} (")
    finally:
        for p in (root, other):
            p.kill()
            p.wait()


def test_the_watch_counts_another_job_only_from_the_sandboxs_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm sandbox waits at its gate while the evaluation before it computes: what it sees
    then is no sharing, and the memory limit over its own tree still holds throughout."""
    root, other = subprocess.Popen(SLEEP), subprocess.Popen(SLEEP)
    try:
        monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([root.pid, other.pid]))
        granted = threading.Event()
        w = GpuWatch(root.pid, ("0",), None, kill=lambda: None, interval=0.02,
                     counting=granted.is_set)
        w.start()
        time.sleep(0.2)
        assert not w.foreign and w.shared_by() == ()
        granted.set()
        deadline = time.monotonic() + 5
        while not w.foreign and time.monotonic() < deadline:
            time.sleep(0.02)
        w.stop()
        w.join(5)
        assert list(w.foreign) == [other.pid]
        killed: list[bool] = []
        m = GpuWatch(root.pid, ("0",), 512 << 10, kill=lambda: killed.append(True),
                     interval=0.02, counting=lambda: False)
        m.start()
        m.join(5)
        assert m.fired == "gpu_memory_limit" and killed and not m.foreign
    finally:
        for p in (root, other):
            p.kill()
            p.wait()


def test_the_watch_enforces_the_gpu_memory_limit_over_the_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    root = subprocess.Popen(SLEEP)
    try:
        monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([root.pid]))
        killed: list[bool] = []
        w = GpuWatch(root.pid, ("0",), 512 << 10, kill=lambda: killed.append(True), interval=0.02)
        w.start()
        w.join(5)
        assert w.fired == "gpu_memory_limit" and killed and not w.foreign
    finally:
        root.kill()
        root.wait()
