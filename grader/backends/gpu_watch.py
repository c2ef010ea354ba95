"""The host's NVML view of a sandbox's GPUs while it runs (``nvidia-ml-py``, where installed).

It sees what no process inside the sandbox can: NVML inside a pid namespace lists only that
namespace's processes, so a judge never sees another job on its GPU (an H200, 2026-12-01: a
CUDA process outside the sandbox held a context beside an evaluation, and the judge's count
saw nothing).

* **GPU memory limit**: the device memory NVML reports for the processes of the sandbox's
  tree, summed; past the limit the tree is killed (``gpu_memory_limit``). The harness also
  caps each runner's allocator; this catches memory taken around torch's allocator.
* **A shared device**: a compute process on one of the sandbox's GPUs that is alive and not
  in the sandbox's tree (its ancestry does not reach the sandbox's root) is another job's.
  Its kernels time-slice with the candidate's, so the host does not let a timing verdict
  stand on such a run (:mod:`grader.grading.shared_device`). Counted only once the sandbox
  has its turn at the device (``counting``): a warm sandbox waits at its gate while the
  evaluation before it computes on the same GPU, and that wait shares nothing: the gate is
  given back only once the holder's tree is dead. (An H100, 2026-12-05: of three pooled
  acceptances one after another, the second ended ``foreign_gpu_process``; each sandbox but
  the first had waited, watched, while the one before it ran.)

Without the package, a driver, or a GPU id NVML can resolve, :attr:`GpuWatch.available` is
False: the memory limit rests on the allocator cap, and sharing goes unseen (the report's
enforcement says so).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import psutil

from grader.limits import LimitName

MAX_FOREIGN = 8  # processes named in the report; the count is kept in full


def _handle(nvml: Any, gpu_id: str) -> Any:
    if gpu_id.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(gpu_id))
    return nvml.nvmlDeviceGetHandleByUUID(gpu_id)


class GpuWatch(threading.Thread):
    def __init__(self, root_pid: int, gpu_ids: tuple[str, ...], limit_bytes: int | None,
                 kill: Callable[[], None], interval: float = 0.2,
                 counting: Callable[[], bool] = lambda: True) -> None:
        super().__init__(daemon=True, name=f"kgrader-gpu-watch-{root_pid}")
        self.root_pid, self.limit, self.kill, self.interval = root_pid, limit_bytes, kill, interval
        self.counting = counting  # False while the sandbox waits for its turn at the device
        self.fired: LimitName | None = None
        self.available = False
        self.foreign: dict[int, str] = {}  # pid -> "pid N (name)" of another job's process
        self.foreign_bytes: dict[int, int] = {}  # pid -> the most device memory it was seen to hold
        self._stop_event = threading.Event()
        self._handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [_handle(pynvml, g) for g in (gpu_ids or ("0",))]
            self.available = True
        except Exception:  # no package, no driver, an id NVML cannot resolve (MIG)
            self._handles = []

    def stop(self) -> None:
        self._stop_event.set()

    def shared_by(self) -> tuple[str, ...]:
        """Another job's processes seen on the sandbox's GPUs, each with the most device
        memory it held ("pid N (name, 120.5 GiB)"; a full device is then its doing)."""
        return tuple(sorted(_label(desc, self.foreign_bytes.get(pid, 0))
                            for pid, desc in self.foreign.items()))[:MAX_FOREIGN]

    def _in_tree(self, pid: int) -> bool | None:
        """Whether ``pid`` descends from the sandbox's root; None when it is gone (then
        nothing proves it was not the sandbox's)."""
        try:
            return any(p.pid == self.root_pid for p in psutil.Process(pid).parents())
        except psutil.Error:
            return None

    def run(self) -> None:
        while self.available and not self._stop_event.wait(self.interval):
            try:
                root = psutil.Process(self.root_pid)
                tree = {root.pid, *(p.pid for p in root.children(recursive=True))}
            except psutil.Error:
                return
            used, counting = 0, self.counting()
            for h in self._handles:
                try:
                    procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(h)
                except Exception:
                    continue
                for p in procs:
                    if p.pid in tree:
                        used += int(p.usedGpuMemory or 0)
                    elif not counting:
                        continue
                    elif p.pid in self.foreign:
                        self._held(p.pid, p.usedGpuMemory)
                    elif p.pid != os.getpid() and self._in_tree(p.pid) is False:
                        self.foreign[p.pid] = f"pid {p.pid} ({_name(p.pid)})"
                        self._held(p.pid, p.usedGpuMemory)
            if self.limit is not None and used > self.limit:
                self.fired = "gpu_memory_limit"
                self.kill()
                return


    def _held(self, pid: int, used: int | None) -> None:
        n = int(used or 0)
        if n < 1 << 62:  # NVML's "not available" is all ones
            self.foreign_bytes[pid] = max(self.foreign_bytes.get(pid, 0), n)


def _label(desc: str, nbytes: int) -> str:
    """``desc`` ("pid N (name)") with the memory it held: "pid N (name, 1.25 GiB)"."""
    if nbytes <= 0 or not desc.endswith(")"):
        return desc
    held = f"{nbytes / 2**30:.2f} GiB" if nbytes >= 1 << 30 else f"{nbytes / 2**20:.0f} MiB"
    return f"{desc[:-1]}, {held})"


def _name(pid: int) -> str:
    try:
        return str(psutil.Process(pid).name())
    except psutil.Error:
        return "?"
