"""Roofline floors: the fastest time a task could physically take on a device.

A measured time below the floor is an anomaly (a cheat or a broken measurement), never a
record. Peaks come from calibration (``kgrader calibrate`` -> hardware.json); without
them, CPU runs have no floor and the report says so.
"""

from __future__ import annotations

from grader.task import TaskSpec

# Generous ceilings (about 1.5x the datasheets) used only when nothing was calibrated:
# a floor from these can never reject an honest kernel.
_DATASHEET_CEILINGS = {"cuda": {"bandwidth_gbps": 4800 * 1.5, "tflops": 990 * 1.5}}


def floor_ms(spec: TaskSpec, device: str, peaks: dict[str, float] | None) -> float | None:
    """Floor for the first tune shape, or None when no peak is known for the device."""
    if spec.cost_model is None:
        return None
    ceil = peaks or _DATASHEET_CEILINGS.get(device)
    if not ceil:
        return None
    nbytes, flops = spec.cost_model.evaluate(spec.timed_dims())
    t_mem = nbytes / (ceil["bandwidth_gbps"] * 1e9) if ceil.get("bandwidth_gbps") else 0.0
    t_cmp = flops / (ceil["tflops"] * 1e12) if ceil.get("tflops") else 0.0
    return max(t_mem, t_cmp) * 1e3
