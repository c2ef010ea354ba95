"""A sandbox whose cgroup is killed and removed from outside is the infrastructure's fault.

That is what a sweep that took a live run for an orphan did (owner tokens made of the wall
clock, before ea02624), and what an operator's `kgrader sandbox cleanup --include-live` or a
host tool does: every process in the cgroup gets SIGKILL and its OOM count goes with the
directory. Only root on the host can remove it (bwrap mounts no /sys in the sandbox), so
the report says ``judge_killed`` (infrastructure, retried), never the candidate's
``judge_died``.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import pytest

from ._backends import backend_or_skip
from .test_clean_stops import _run_args, _sleepy, _start, _started, _wait

CGROUPS = Path("/sys/fs/cgroup")
pytestmark = pytest.mark.bwrap


def _cgroups_of(pid: int) -> list[Path]:
    return [*CGROUPS.glob(f"kgrader/*@{pid}@*"), *CGROUPS.glob(f"memory/kgrader-*@{pid}@*"),
            *CGROUPS.glob(f"pids/kgrader-*@{pid}@*")]


def _kill_and_remove(cg: Path) -> None:
    kill = cg / "cgroup.kill"
    if kill.exists():
        kill.write_text("1")
    else:  # cgroup v1: no cgroup.kill
        import os
        import signal

        try:
            pids = (cg / "cgroup.procs").read_text().split()
        except FileNotFoundError:
            return  # the run ended (its other controller's kill) and removed it itself
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    for _ in range(200):
        try:
            cg.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)
    raise AssertionError(f"{cg} could not be removed")


def test_a_sandbox_whose_cgroup_is_removed_from_outside_is_judge_killed(tmp_path: Path) -> None:
    backend_or_skip("bwrap")
    tmpdir, cand = _sleepy(tmp_path)
    proc = _start([*_run_args(cand, "bwrap"), "--json"], tmpdir)
    try:
        _wait("the sandbox to run", lambda: bool(_started(tmpdir, proc.pid)), proc)
        groups = _cgroups_of(proc.pid)
        if not groups:
            pytest.skip("this host gives bwrap sandboxes no cgroup")
        time.sleep(1)  # the runner sleeps in its import; the judge waits on it
        for cg in groups:
            _kill_and_remove(cg)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err[-3000:]
    assert "Traceback" not in err
    report = json.loads(out)
    codes = [(e["stage"], e["code"], e["origin"]) for e in report["errors"]]
    assert codes == [("sandbox", "judge_killed", "infrastructure")], report["errors"]
    assert list(tmpdir.iterdir()) == []
