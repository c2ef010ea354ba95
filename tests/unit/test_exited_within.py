"""The host's wait for a sandbox: woken when it exits (no 50 ms polling), bounded by its limit."""

from __future__ import annotations

import subprocess
import time

from grader.backends.bwrap.supervise import exited_within


def test_an_exit_is_seen_at_once_and_reaped() -> None:
    proc = subprocess.Popen(["sleep", "0.2"])
    t0 = time.monotonic()
    assert exited_within(proc, 10.0)
    waited = time.monotonic() - t0
    assert proc.returncode == 0 and 0.15 < waited < 5.0
    assert exited_within(proc, 0.0)  # already reaped: still an exit


def test_a_process_past_its_limit_is_not_an_exit() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        t0 = time.monotonic()
        assert not exited_within(proc, 0.2)
        assert 0.15 < time.monotonic() - t0 < 5.0 and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
