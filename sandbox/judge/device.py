"""What the report says about the software and the device (also the calibration fingerprint)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import re
import sys
from typing import TYPE_CHECKING, Any

import torch

from sandbox.contract.device_memory import Figures

if TYPE_CHECKING:
    from sandbox.tools.nvml import Nvml


def device_environment(device: str) -> dict[str, Any]:
    """What the report says about the software and the device (the calibration fingerprint)."""
    env: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                           "cpu_name": _cpu_name()}
    env["triton"] = _triton_version()
    if device == "cuda":
        try:
            p = torch.cuda.get_device_properties(0)
        except Exception as e:  # the record must still be written: say what failed
            env["device_error"] = f"{type(e).__name__}: {e}"[:300]
            return env
        env.update({"device_name": p.name, "cuda": torch.version.cuda, "sm": f"{p.major}.{p.minor}",
                    "memory_gib": round(p.total_memory / 2**30, 1),
                    "device_uuid": str(getattr(p, "uuid", "")), "driver": _driver_version(),
                    # what the sandbox can see: one GPU, and no other GPU's device node
                    "visible_devices": torch.cuda.device_count(),
                    "device_nodes": sorted(n for n in os.listdir("/dev")
                                           if n.startswith("nvidia") and n[6:].isdigit())})
    else:
        # platform.processor() runs `uname -p` in a subprocess (a fork of the judge) for a
        # name that is empty on Linux anyway
        env.update({"device_name": platform.machine(),
                    "cpu_count": os.cpu_count(),
                    "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1"})
    return env


def _triton_version() -> str:
    """Triton's version without importing it where the judge has not (its import took 0.13
    s of every CPU evaluation's record, for one string): the loaded module's, else the
    installed distribution's."""
    mod = sys.modules.get("triton")
    v = getattr(mod, "__version__", None) if mod is not None else None
    if isinstance(v, str):
        return v
    try:
        return importlib.metadata.version("triton")
    except Exception as e:  # not installed, or unreadable metadata: say so
        return f"unavailable: {type(e).__name__}"


def _cpu_name() -> str | None:
    """The host CPU's model (``platform.processor()`` is empty on Linux); the leaderboard's
    hardware line names it, as launch overhead depends on it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware")):
                    return line.split(":", 1)[1].strip()[:120] or None
    except OSError:
        return None
    return None


def _driver_version() -> str | None:
    try:
        with open("/proc/driver/nvidia/version") as f:
            first = f.readline()
    except OSError:
        return None
    m = re.search(r"\b(\d+\.\d+(?:\.\d+)?)\b", first)
    return m.group(1) if m else first.strip()[:80]


def open_nvml(dev: str) -> tuple[Nvml | None, str]:
    """NVML for clocks/power/throttle per block, or the reason it is unavailable."""
    if dev != "cuda":
        return None, "no NVML on the CPU"
    from sandbox.tools.nvml import Nvml

    try:
        return Nvml.open(str(getattr(torch.cuda.get_device_properties(0), "uuid", "")))
    except Exception as e:  # a missing symbol in an old driver: report, never fail the run
        return None, f"NVML error: {e}"


def gpu_fraction(dev: str, mib: int | None) -> float | None:
    """Per-runner share of the device for ``limits.gpu_memory_mib`` (torch's allocator cap)."""
    if dev != "cuda" or not mib:
        return None
    total = torch.cuda.get_device_properties(0).total_memory
    return min(1.0, (int(mib) << 20) / total)


def memory_figures(dev: str, nv: Nvml | None = None) -> Figures:
    """The device's memory now, for a :mod:`sandbox.contract.device_memory` failure: free and
    total (torch's ``mem_get_info``: the whole device, every process's use counted), and the
    compute processes NVML shows with what each holds (inside the sandbox's pid namespace
    only its own; the rest of the used memory is another job's). Whatever cannot be read
    is left out: the failure is reported with what is known."""
    if dev != "cuda":
        return Figures()
    free = total = None
    with contextlib.suppress(Exception):  # a context the OOM left unusable: say less
        free, total = (int(x) for x in torch.cuda.mem_get_info())
    holders: dict[str, int] = {}
    if nv is None:
        nv = open_nvml(dev)[0]
    if nv is not None:
        from sandbox.tools.nvml import compute_process_memory

        with contextlib.suppress(Exception):
            procs = compute_process_memory(nv) or {}
            holders = {f"pid {pid}": used for pid, used in procs.items()}
    return Figures(free=free, total=total, holders=holders)
