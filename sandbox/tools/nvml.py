"""Clocks, power and throttle reasons from NVML, read with ctypes (no extra package).

Used by the judge once per timing block. Where the library or the device is missing, every
call returns ``None`` and the report says why the fields are absent.
"""

from __future__ import annotations

import ctypes
from typing import Any

_THROTTLE = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap",
             0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal",
             0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks"}
NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0


class Nvml:
    """A handle on one device, found by the UUID torch reports for CUDA device 0."""

    def __init__(self, lib: Any, handle: ctypes.c_void_p):
        self.lib = lib
        self.handle = handle

    @classmethod
    def open(cls, uuid: str) -> tuple[Nvml | None, str]:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as e:
            return None, f"libnvidia-ml.so.1 not loadable: {e}"
        if lib.nvmlInit_v2() != 0:
            return None, "nvmlInit failed"
        handle = ctypes.c_void_p()
        name = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        if lib.nvmlDeviceGetHandleByUUID(name.encode(), ctypes.byref(handle)) != 0:
            return None, f"no NVML device with UUID {name}"
        return cls(lib, handle), ""

    def _uint(self, fn: str, *args: Any) -> int | None:
        out = ctypes.c_uint()
        rc = getattr(self.lib, fn)(self.handle, *args, ctypes.byref(out))
        return out.value if rc == 0 else None

    def sample(self) -> dict[str, Any]:
        reasons = ctypes.c_ulonglong()
        rc = self.lib.nvmlDeviceGetCurrentClocksThrottleReasons(self.handle, ctypes.byref(reasons))
        power = self._uint("nvmlDeviceGetPowerUsage")
        return {
            "sm_clock_mhz": self._uint("nvmlDeviceGetClockInfo", NVML_CLOCK_SM),
            "mem_clock_mhz": self._uint("nvmlDeviceGetClockInfo", NVML_CLOCK_MEM),
            "power_w": None if power is None else power / 1000.0,
            "temperature_c": self._uint("nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU),
            "throttle": None if rc != 0 else [n for bit, n in _THROTTLE.items() if reasons.value & bit],
        }


class _ProcessInfo(ctypes.Structure):
    """nvmlProcessInfo_t (the _v2/_v3 calls): pid, used memory, GPU/compute instance ids."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class _ProcessInfoV1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


NVML_ERROR_INSUFFICIENT_SIZE = 7


def compute_processes(nv: Nvml) -> list[int] | None:
    """Pids (as NVML reports them: host pids) of the compute processes on the device.

    None when the driver cannot say."""
    procs = compute_process_memory(nv)
    return None if procs is None else list(procs)


def compute_process_memory(nv: Nvml) -> dict[int, int] | None:
    """pid -> device memory used (bytes; 0 where the driver does not say) of each compute
    process NVML shows (inside a pid namespace: that namespace's only).

    None when the driver cannot say. The list can grow between the two calls; the second
    asks for room to spare and retries a few times.
    """
    for fn, struct in (("nvmlDeviceGetComputeRunningProcesses_v3", _ProcessInfo),
                       ("nvmlDeviceGetComputeRunningProcesses_v2", _ProcessInfo),
                       ("nvmlDeviceGetComputeRunningProcesses", _ProcessInfoV1)):
        call = getattr(nv.lib, fn, None)
        if call is None:
            continue
        count = ctypes.c_uint(0)
        rc = call(nv.handle, ctypes.byref(count), None)
        for _ in range(4):
            if rc == 0 and count.value == 0:
                return {}
            if rc not in (0, NVML_ERROR_INSUFFICIENT_SIZE):
                return None
            size = count.value + 8
            buf = (struct * size)()
            count = ctypes.c_uint(size)
            rc = call(nv.handle, ctypes.byref(count), buf)
            if rc == 0:
                return {int(buf[i].pid): _used(buf[i].usedGpuMemory) for i in range(count.value)}
        return None
    return None


def _used(n: int) -> int:
    """NVML's used memory, 0 for NVML_VALUE_NOT_AVAILABLE (all ones)."""
    return 0 if n >= (1 << 63) else int(n)


def foreign_compute_processes(nv: Nvml | None, expected: int) -> str | None:
    """A message when the device runs more compute processes than the judge started.

    ``expected`` counts the judge and its live runners. A helper process of a runner that
    opened its own CUDA context (to compete for the GPU during the other side's timing, or
    to keep working after a call returned) shows up here even though it is invisible to
    the runner's own accounting. Assumes the sandbox has the device to itself (kgrader
    assigns GPUs per sandbox); without NVML it returns None (the report already says why
    device state is unmeasured) and the process count by uid still holds.
    """
    if nv is None:
        return None
    pids = compute_processes(nv)
    if pids is None or len(pids) <= expected:
        return None
    return (f"{len(pids)} compute processes on the device but the judge started {expected} "
            f"(judge and runners); NVML pids: {sorted(pids)[:10]}")
