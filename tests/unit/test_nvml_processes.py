"""Counting compute processes through NVML: the two-call protocol (fake library, pure logic)
and, on a CUDA machine, real processes with their own contexts."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import time
from typing import Any

import pytest

from sandbox.tools import nvml


class FakeLib:
    """NVML's compute-process call: INSUFFICIENT_SIZE with the count, then the records."""

    def __init__(self, pids: list[int], versions: tuple[str, ...] = ("_v3",), fail: int = 0) -> None:
        self.pids = pids
        self.fail = fail
        for v in versions:
            setattr(self, f"nvmlDeviceGetComputeRunningProcesses{v}", self._call)

    def _call(self, handle: Any, count: Any, buf: Any) -> int:
        if self.fail:
            return self.fail
        n = count._obj  # ctypes.byref(c_uint)
        if buf is None or n.value < len(self.pids):
            n.value = len(self.pids)
            return 0 if not self.pids else nvml.NVML_ERROR_INSUFFICIENT_SIZE
        for i, pid in enumerate(self.pids):
            buf[i].pid = pid
        n.value = len(self.pids)
        return 0


def fake(pids: list[int], **kw: Any) -> nvml.Nvml:
    return nvml.Nvml(FakeLib(pids, **kw), ctypes.c_void_p())


def test_processes_are_listed_through_the_two_call_protocol() -> None:
    assert nvml.compute_processes(fake([11, 22, 33])) == [11, 22, 33]
    assert nvml.compute_processes(fake([])) == []


def test_old_drivers_fall_back_to_the_unversioned_call() -> None:
    assert nvml.compute_processes(fake([5, 6], versions=("",))) == [5, 6]


def test_a_driver_error_means_unknown_not_zero() -> None:
    assert nvml.compute_processes(fake([1], fail=999)) is None
    assert nvml.foreign_compute_processes(fake([1, 2, 3], fail=999), 1) is None


def test_more_processes_than_the_judge_started_is_reported() -> None:
    msg = nvml.foreign_compute_processes(fake([100, 200, 300]), 2)
    assert msg is not None and "3 compute processes" in msg and "started 2" in msg
    assert nvml.foreign_compute_processes(fake([100, 200]), 2) is None
    assert nvml.foreign_compute_processes(fake([100]), 3) is None  # a runner not on the GPU yet
    assert nvml.foreign_compute_processes(None, 1) is None


def _cuda_nvml() -> nvml.Nvml:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    torch.zeros(1, device="cuda")
    nv, why = nvml.Nvml.open(str(torch.cuda.get_device_properties(0).uuid))
    if nv is None:
        pytest.skip(why)
    return nv


@pytest.mark.gpu
def test_a_second_cuda_process_is_seen_as_foreign() -> None:
    nv = _cuda_nvml()
    base = nvml.compute_processes(nv)
    assert base is not None and len(base) >= 1
    child = subprocess.Popen([sys.executable, "-c", "import torch, time; torch.zeros(1, device='cuda'); "
                              "print('up', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "up"
        time.sleep(0.5)
        assert nvml.foreign_compute_processes(nv, len(base)) is not None
        assert nvml.foreign_compute_processes(nv, len(base) + 1) is None
    finally:
        child.kill()
        child.wait()
