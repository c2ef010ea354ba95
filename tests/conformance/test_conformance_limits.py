"""Resource limits: every attack ends, is reported with the limit that stopped it, and
leaves nothing behind on the host."""

from __future__ import annotations

import os
import re
import signal
import threading
from dataclasses import dataclass

import psutil
import pytest

from grader.report.model import Report

from ._support import GOOD, Host, describe


def _first(report: Report) -> tuple[str, str]:
    assert report.errors, describe(report)
    return report.errors[0].stage, report.errors[0].code


SMALL = {"pids": 64, "memory_mib": 1536, "tmpfs_mib": 64}


def test_good_candidate_passes_under_the_small_limits_used_here(host: Host) -> None:
    # Control: the limits below are not so tight that any candidate would trip them.
    report = host.evaluate(GOOD, limits=SMALL)
    assert report.ok and report.sandbox is not None, describe(report)
    assert report.sandbox.limit_fired is None, describe(report)
    host.assert_unharmed()


def test_fork_bomb_is_killed_and_reported_as_pids_limit(host: Host) -> None:
    report = host.evaluate("fork_bomb", limits={"pids": 64})
    assert not report.ok, describe(report)
    assert _first(report)[1] == "pids_limit", describe(report)
    assert report.sandbox is not None and report.sandbox.limit_fired == "pids_limit", describe(
        report
    )
    host.assert_unharmed()


def test_stubborn_fork_bomb_is_stopped_and_reported_as_pids_limit(
    host: Host, backend: str, request: pytest.FixtureRequest
) -> None:
    report = host.evaluate("fork_bomb_stubborn", limits={"pids": 64, "compile_s": 15})
    assert not report.ok, describe(report)
    assert report.sandbox is not None and report.sandbox.limit_fired == "pids_limit", describe(
        report
    )
    host.assert_unharmed()
    assert _first(report)[1] == "pids_limit", describe(report)


def test_memory_bomb_is_killed_and_reported_as_memory_limit(host: Host) -> None:
    report = host.evaluate("memory_bomb", limits={"memory_mib": 1536})
    assert not report.ok, describe(report)
    assert _first(report)[1] == "memory_limit", describe(report)
    assert report.sandbox is not None and report.sandbox.oom_killed, describe(report)
    host.assert_unharmed()


@pytest.fixture(scope="module")
def tmpfs_fill(module_host: Host) -> Report:
    free_before = psutil.disk_usage("/tmp").free
    report = module_host.evaluate("tmpfs_fill", limits={"tmpfs_mib": 64})
    # The sandbox's /tmp is its own capped tmpfs: the host's /tmp did not lose 64 MiB+.
    assert free_before - psutil.disk_usage("/tmp").free < 32 << 20
    return report


def _free_inodes(path: str = "/tmp") -> int:
    return os.statvfs(path).f_ffree


def test_many_empty_files_are_stopped_by_the_inode_cap_as_disk_limit(host: Host) -> None:
    # Other work on this machine creates files too; the flood would create millions.
    before = _free_inodes()
    report = host.evaluate("inode_flood", limits={"tmpfs_inodes": 16384})
    assert before - _free_inodes() < 8192, "the flood reached the host's /tmp"
    assert not report.ok, describe(report)
    assert _first(report) == ("compile", "disk_limit"), describe(report)
    assert "No space left on device" in report.errors[0].message, describe(report)
    sb = report.sandbox
    assert sb is not None and sb.enforcement is not None
    scratch = {m.path: m for m in sb.enforcement.disk.scratch}
    assert scratch["/tmp"].inodes == 16384 and scratch["/dev/shm"].inodes == 16384
    assert scratch["/tmp"].size_bytes == report.sandbox.limits.tmpfs_mib << 20
    host.assert_unharmed()


def test_tmpfs_fill_fails_cleanly_with_no_space_left(tmpfs_fill: Report, module_host: Host) -> None:
    report = tmpfs_fill
    assert not report.ok, describe(report)
    stage, _ = _first(report)
    assert stage == "compile", describe(report)
    assert "No space left on device" in report.errors[0].message, describe(report)
    module_host.assert_unharmed()


def test_tmpfs_fill_is_reported_as_disk_limit(tmpfs_fill: Report) -> None:
    assert _first(tmpfs_fill)[1] == "disk_limit", describe(tmpfs_fill)


def test_infinite_loop_in_import_is_reported_as_compile_timeout(host: Host) -> None:
    report = host.evaluate("loop_in_import", limits={"compile_s": 10})
    assert not report.ok, describe(report)
    assert _first(report) == ("compile", "compile_timeout"), describe(report)
    host.assert_unharmed()


@dataclass
class LaunchLoop:
    report: Report
    leftovers: list[str]
    host: Host


RUN_S = 5.0


@pytest.fixture(scope="module")
def launch_loop(module_host: Host) -> LaunchLoop:
    report = module_host.evaluate("loop_in_launch", limits={"compile_s": 30, "run_s": RUN_S})
    return LaunchLoop(report, module_host.leftovers(), module_host)


def test_infinite_loop_in_launch_is_reported_as_timeout_and_whole_tree_killed(
    launch_loop: LaunchLoop,
) -> None:
    report = launch_loop.report
    assert not report.ok, describe(report)
    assert _first(report) == ("correctness", "timeout"), describe(report)
    # The candidate left a detached, SIGTERM-ignoring grandchild in its own session.
    assert launch_loop.leftovers == []
    launch_loop.host.assert_unharmed()


def test_run_time_limit_counts_from_the_end_of_compile(launch_loop: LaunchLoop) -> None:
    msg = launch_loop.report.errors[0].message
    m = re.search(r"no answer within ([\d.]+) s", msg)
    assert m, msg
    assert float(m.group(1)) <= RUN_S + 0.5, msg


def test_sigterm_ignoring_candidate_is_still_killed(host: Host) -> None:
    report = host.evaluate("sigterm_ignored", limits={"compile_s": 10})
    assert not report.ok, describe(report)
    assert _first(report) == ("compile", "compile_timeout"), describe(report)
    host.assert_unharmed()


SIGTERM_PROOF_TREE = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    while True:
        pass
while True:
    time.sleep(0.1)
"""


def test_backend_kills_sigterm_ignoring_tree_at_its_wall_limit(host: Host) -> None:
    # No judge here: only the backend's own wall clock (compile_s + run_s + 30 s) can stop it.
    outcome, _ = host.run_argv(SIGTERM_PROOF_TREE, compile_s=1, run_s=1)
    assert outcome.timed_out, outcome
    assert outcome.limit_fired == "timeout", outcome
    assert outcome.exit_code != 0, outcome
    host.assert_unharmed()


def test_stdout_flood_is_capped_and_host_memory_stays_flat(host: Host) -> None:
    me = psutil.Process()
    base = me.memory_info().rss
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            peak[0] = max(peak[0], me.memory_info().rss)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        report = host.evaluate("stdout_flood", limits={"output_bytes": 1 << 20, "compile_s": 60})
    finally:
        stop.set()
        t.join()
    sb = report.sandbox
    assert sb is not None and sb.output_truncated, describe(report)
    assert len(sb.stdout_tail) <= 2000
    # Completes (the flood is 1 GiB at import, then a correct add) or fails cleanly.
    assert report.ok or report.errors[0].code in ("compile_timeout", "output_limit"), describe(
        report
    )
    assert peak[0] - base < 256 << 20, f"host RSS grew by {(peak[0] - base) >> 20} MiB"
    host.assert_unharmed()


# --------------------------------------------------------------------------- which limit


FLOOD_THEN_MEMORY = """
import sys
sys.stdout.buffer.write(b"A" * (8 << 20)); sys.stdout.flush()
sys.stderr.buffer.write(b"E" * (8 << 20)); sys.stderr.flush()
blocks = []
while True:
    blocks.append(bytearray(16 << 20))
"""


def test_flood_then_memory_bomb_is_reported_as_memory_limit_with_output_truncated(
    host: Host,
) -> None:
    outcome, _ = host.run_argv(FLOOD_THEN_MEMORY, memory_mib=256, output_bytes=65536)
    assert outcome.limit_fired == "memory_limit", outcome.limit_fired
    assert outcome.oom_killed and outcome.output_truncated
    assert len(outcome.stdout) + len(outcome.stderr) <= 65536
    assert outcome.stdout.startswith(b"AAAA") and outcome.stderr.startswith(b"EEEE")
    host.assert_unharmed()


FLOOD_THEN_HANG = """
import sys, time
sys.stdout.buffer.write(b"A" * (8 << 20)); sys.stdout.flush()
while True:
    time.sleep(1)
"""


def test_flood_then_hang_is_reported_as_timeout_with_output_truncated(host: Host) -> None:
    outcome, _ = host.run_argv(FLOOD_THEN_HANG, compile_s=1, run_s=1, output_bytes=65536)
    assert outcome.limit_fired == "timeout" and outcome.timed_out, outcome.limit_fired
    assert outcome.output_truncated and len(outcome.stdout) == 65536
    host.assert_unharmed()


FLOOD_TO_THE_END = """
import sys
for stream in (sys.stdout.buffer, sys.stderr.buffer):
    for _ in range(64):
        stream.write(b"x" * (1 << 20))
    stream.flush()
print("done", file=sys.stderr, flush=True)
"""


def test_a_flood_is_drained_so_the_process_finishes_normally(host: Host) -> None:
    outcome, _ = host.run_argv(FLOOD_TO_THE_END, output_bytes=65536)
    assert outcome.exit_code == 0 and outcome.limit_fired is None, outcome.limit_fired
    assert outcome.signal is None, "the sandbox saw SIGPIPE or was killed"
    assert outcome.output_truncated and len(outcome.stdout) + len(outcome.stderr) == 65536
    host.assert_unharmed()


# Python ignores SIGXFSZ (a write then fails with EFBIG); native code gets the default.
OVERSIZED_FILE = """
import signal
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
with open("/kg/out/big", "wb") as f:
    for _ in range(12):
        f.write(b"x" * (1 << 20))
"""


def test_a_file_over_rlimit_fsize_is_killed_by_sigxfsz_and_reported_as_disk_limit(
    host: Host,
) -> None:
    # tmpfs 8 MiB and result cap 8 MiB: RLIMIT_FSIZE is 8 MiB; /kg/out is on the host disk.
    outcome, out_dir = host.run_argv(OVERSIZED_FILE, tmpfs_mib=8, result_bytes=8 << 20)
    assert outcome.signal == signal.SIGXFSZ and outcome.exit_code is None, outcome.signal
    assert outcome.limit_fired == "disk_limit", outcome.limit_fired
    assert (out_dir / "big").stat().st_size == 8 << 20
    assert outcome.enforcement is not None
    assert outcome.enforcement.disk.file_size_bytes == 8 << 20
    host.assert_unharmed()
