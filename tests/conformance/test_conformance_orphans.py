"""Leftovers of a host process killed with SIGKILL, and reclaiming them.

A real ``kgrader run`` (a subprocess, on the backend under test) is killed with SIGKILL
while its candidate sleeps at import: no ``finally`` runs, so its evaluation folder stays
in the temp dir (and on docker its container keeps running; on bwrap its cgroup stays).
``kgrader sandbox cleanup`` must remove exactly those, and leave a second, live
evaluation's folder and container alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from grader.backends.cleanup import read_marker

from ._support import REPO, RUNTIME_ONLY, TASK, Host

CLI = ("-m", "grader.cli")  # the real command line, as a user runs it


def _kgrader(args: list[str], tmpdir: Path, **kw: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmpdir)}
    return subprocess.Popen([sys.executable, *CLI, *args], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)


def _folder_of(tmpdir: Path, pid: int) -> Path | None:
    for path in tmpdir.glob("kgrader-eval-*"):
        marker = read_marker(path)
        if marker and marker["owner"].split(":")[1] == str(pid):
            return path
    return None


def _wait_running(tmpdir: Path, proc: subprocess.Popen[bytes], timeout: float = 180) -> Path:
    """The run's evaluation folder, once its judge has consumed the secret file."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
        folder = _folder_of(tmpdir, proc.pid)
        if folder is not None and (folder / "in" / "candidate.py").exists() and not (
            folder / "out" / ".judge-secret.json"
        ).exists():
            return folder
        time.sleep(0.5)
    raise AssertionError("the evaluation never started")


def _containers_of(pid: int) -> list[str]:
    from grader.backends.docker.prereqs import client

    listed = client().containers.list(all=True, filters={"label": "kgrader=1"}, ignore_removed=True)
    return [str(c.name) for c in listed
            if (c.labels.get("kgrader.owner") or "").split(":")[1:2] == [str(pid)]]


def _cgroups_of(pid: int) -> list[Path]:
    root = Path("/sys/fs/cgroup")
    return [*root.glob(f"memory/kgrader-*@{pid}@*"), *root.glob(f"pids/kgrader-*@{pid}@*"),
            *root.glob(f"kgrader/*@{pid}@*")]


def _other_kgrader_commands() -> bool:
    """Whether kgrader commands other than this test's run on the host (each sweeps at start)."""
    me = os.getpid()
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "grader.cli" in cmd and p.info["pid"] != me and me not in {q.pid for q in _parents(p)}:
            return True
    return False


def _parents(p: psutil.Process) -> list[psutil.Process]:
    try:
        return list(p.parents())
    except psutil.Error:
        return []


def _cleanup(tmpdir: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, *CLI, "sandbox", "cleanup", "--temp-dir", str(tmpdir), "--json"],
        env=env, cwd=REPO, capture_output=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.mark.slow
def test_sigkilled_runs_leftovers_are_reclaimed_and_a_live_run_is_untouched(host: Host) -> None:
    tmpdir = host.work / "tmp"  # inside the test's folder: leftover processes are found
    tmpdir.mkdir()
    cand = host.candidate("sleep_in_import", seconds=600)
    args = ["run", str(TASK), str(cand), "--backend", host.backend, "--device", "cpu",
            "--policy", str(RUNTIME_ONLY), "--compile-s", "600", "--run-s", "60"]
    victim, live = _kgrader(args, tmpdir), _kgrader(args, tmpdir)
    try:
        victim_dir = _wait_running(tmpdir, victim)
        live_dir = _wait_running(tmpdir, live)
        if host.backend == "docker":
            assert _containers_of(victim.pid) and _containers_of(live.pid)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        time.sleep(1.0)

        # What SIGKILL leaves behind. Containers and cgroups are host-wide: on a host where
        # other kgrader commands start meanwhile (a loaded CI machine), their start-up sweep
        # may reclaim them before this test's cleanup does; the folder is in this test's own
        # TMPDIR, which only this test sweeps.
        assert victim_dir.is_dir() and (victim_dir / "in" / "candidate.py").exists()
        left = _containers_of(victim.pid) if host.backend == "docker" else []
        if not _other_kgrader_commands():
            if host.backend == "docker":
                assert left, "the killed run's container vanished by itself"
            else:
                assert _cgroups_of(victim.pid), "the killed run's cgroup vanished by itself"

        report = _cleanup(tmpdir)
        assert str(victim_dir) in report["folders_removed"], report
        assert not victim_dir.exists()
        assert live_dir.is_dir() and any(str(live_dir) in k for k in report["folders_kept"])
        assert live.poll() is None, "cleanup disturbed the live run"
        if host.backend == "docker":
            still = set(_containers_of(victim.pid))
            assert not still, report
            if not _other_kgrader_commands():
                assert set(left) <= set(report["containers_removed"]), report
            assert _containers_of(live.pid), "cleanup removed the live run's container"
        else:
            assert _cgroups_of(victim.pid) == [], report
            assert _cgroups_of(live.pid), "cleanup removed the live run's cgroup"
    finally:
        for proc in (victim, live):
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
    # Once the second run is killed too, its leftovers are reclaimed in turn.
    report = _cleanup(tmpdir)
    assert not list(tmpdir.glob("kgrader-*")), report
    if host.backend == "docker":
        assert _containers_of(live.pid) == []
    else:
        assert _cgroups_of(live.pid) == []
    host.assert_unharmed()
