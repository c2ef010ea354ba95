"""Host-side watchdogs over a sandbox's process tree (psutil for RSS/threads, NVML for GPU memory).

The watchdog is the fallback for memory and pids limits when no cgroup is writable, and a
second line of defence otherwise. It kills the whole tree when a limit is crossed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import psutil

from grader.limits import LimitName


class Watchdog(threading.Thread):
    """Polls the tree under ``root_pid``; calls ``kill`` once when a limit is crossed."""

    def __init__(self, root_pid: int, *, memory_bytes: int | None, pids: int | None,
                 kill: Callable[[], None], interval: float = 0.05,
                 pids_hit: Callable[[], bool] | None = None):
        super().__init__(daemon=True, name=f"kgrader-watchdog-{root_pid}")
        self.root_pid = root_pid
        self.memory_bytes = memory_bytes
        self.pids = pids
        self.kill = kill
        self.pids_hit = pids_hit
        self.interval = interval
        self.fired: LimitName | None = None
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.root_pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            if self.pids_hit is not None and self.pids_hit():
                # A cgroup refused a fork: stop the tree now rather than let a bomb that
                # swallows EAGAIN spin until the wall limit.
                self.fired = "pids_limit"
                self.kill()
                return
            if self.memory_bytes is None and self.pids is None:
                continue  # a cgroup enforces both: walking the host's process table (psutil's
                # children() reads every /proc/PID/stat, ~2.8 ms of CPU per look with 85
                # processes, 20 looks a second) would decide nothing
            rss, threads = 0, 0
            procs = self._tree()
            if not procs:
                return
            for p in procs:
                try:
                    rss += p.memory_info().rss
                    threads += p.num_threads()
                except psutil.Error:
                    continue
            if self.memory_bytes is not None and rss > self.memory_bytes:
                self.fired = "memory_limit"
            elif self.pids is not None and threads > self.pids:
                self.fired = "pids_limit"
            if self.fired:
                self.kill()
                return
