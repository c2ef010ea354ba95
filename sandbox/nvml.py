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
