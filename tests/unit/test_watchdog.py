"""The host-side watchdog: without a cgroup it walks the sandbox's tree and kills at a limit;
with one (both limits None) it never walks the host's process table, only asks the cgroup."""

from __future__ import annotations

import subprocess
import sys
import time

from grader.backends.watchdog import Watchdog


def _child() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])


def test_a_tree_over_its_memory_limit_is_killed_without_a_cgroup() -> None:
    proc = _child()
    killed: list[bool] = []
    try:
        dog = Watchdog(proc.pid, memory_bytes=1 << 20, pids=None,
                       kill=lambda: killed.append(True), interval=0.01)
        dog.start()
        dog.join(10)
        assert dog.fired == "memory_limit" and killed == [True]
    finally:
        proc.kill()
        proc.wait()


def test_with_a_cgroup_it_asks_the_cgroup_and_never_walks_the_process_table() -> None:
    proc = _child()
    walks: list[int] = []

    def walk() -> list[object]:
        walks.append(1)
        return []
    hits = iter([False, False, False, True])
    killed: list[bool] = []
    try:
        dog = Watchdog(proc.pid, memory_bytes=None, pids=None,
                       kill=lambda: killed.append(True), interval=0.01,
                       pids_hit=lambda: next(hits))
        dog._tree = walk  # type: ignore[method-assign]
        dog.start()
        dog.join(10)
        assert dog.fired == "pids_limit" and killed == [True] and walks == []
        quiet = Watchdog(proc.pid, memory_bytes=None, pids=None, kill=lambda: None,
                         interval=0.01, pids_hit=lambda: False)
        quiet._tree = walk  # type: ignore[method-assign]
        quiet.start()
        time.sleep(0.1)
        quiet.stop()
        quiet.join(5)
        assert walks == [] and quiet.fired is None
    finally:
        proc.kill()
        proc.wait()
