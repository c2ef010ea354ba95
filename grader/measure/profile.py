"""Roofline analysis on the host: where a measured kernel sits against the device's ceilings.

Inputs are all trusted or verified: the task's cost model (bytes moved, flops done at the
timed shape), the verified median time from a :class:`grader.report.model.TimingStats`, and
the calibrated peaks (:mod:`grader.measure.peaks`). Definitions:

* ``ai = flops / bytes`` (arithmetic intensity, flop/byte);
* ``ridge_ai = peak_flops / peak_bandwidth``: kernels with ``ai`` below it are
  ``memory``-bound, the others ``compute``-bound;
* attainable throughput at ``ai``: ``min(peak_tflops, ai * peak_bandwidth)``;
* ``roofline_fraction = t_floor / t_median`` with ``t_floor = max(bytes / peak_bw,
  flops / peak_flops)`` — the same as achieved / attainable throughput, and still
  defined when a kernel does no flops (a copy). Above 1 means faster than the
  calibrated ceilings: an anomaly (a bad calibration or a bad measurement), never a
  record;
* ``bandwidth_utilization_pct`` / ``compute_utilization_pct``: achieved effective
  bandwidth / throughput over the peak, in percent.

The compute ceiling is the calibrated *matmul* peak for the task's dtype (the tensor-core
roof on GPUs), falling back to the highest measured dtype; for elementwise flops this is
an optimistic ceiling, which the ``notes`` say. Nothing here is a hardware counter:
registers, occupancy and spills come from Nsight Compute in a separate sandbox run
(:mod:`grader.diagnostics`); :func:`with_counters` copies them in from its result, and
without one they stay ``None`` with the reason in ``unmeasured``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from grader.report.model import TimingStats
from grader.task import TaskSpec

__all__ = ["Profile", "RooflinePoint", "analyze", "counters_roofline", "roofline_point",
           "with_counters"]

_NO_PROFILER = ("not measured: no hardware-counter profiler ran for this analysis "
                "(grader.diagnostics runs Nsight Compute on an NVIDIA GPU)")
_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


class RooflinePoint(BaseModel):
    """Pure roofline numbers for one (bytes, flops, time) against one pair of peaks."""

    model_config = ConfigDict(frozen=True)

    ai: float | None
    ridge_ai: float
    bound: Literal["memory", "compute"]
    attainable_tflops: float | None
    floor_ms: float
    achieved_bandwidth_gbps: float
    achieved_tflops: float
    bandwidth_utilization_pct: float
    compute_utilization_pct: float
    roofline_fraction: float


def roofline_point(nbytes: float, flops: float, median_ms: float, peak_bandwidth_gbps: float,
                   peak_tflops: float) -> RooflinePoint:
    """Classify and score one measured kernel; all inputs must be positive (flops may be 0).

    ``ai`` is ``None`` when the kernel moves no bytes (then it is compute-bound).
    """
    if median_ms <= 0 or peak_bandwidth_gbps <= 0 or peak_tflops <= 0 or nbytes < 0 or flops < 0:
        raise ValueError("times and peaks must be positive, bytes and flops non-negative")
    bw, pf = peak_bandwidth_gbps * 1e9, peak_tflops * 1e12
    ridge = pf / bw
    ai = flops / nbytes if nbytes > 0 else None
    bound: Literal["memory", "compute"] = "memory" if ai is not None and ai < ridge else "compute"
    t_s = median_ms * 1e-3
    t_floor = max(nbytes / bw, flops / pf)
    attainable = None if ai is None else min(peak_tflops, ai * bw / 1e12)
    return RooflinePoint(
        ai=ai, ridge_ai=ridge, bound=bound, attainable_tflops=attainable, floor_ms=t_floor * 1e3,
        achieved_bandwidth_gbps=nbytes / t_s / 1e9, achieved_tflops=flops / t_s / 1e12,
        bandwidth_utilization_pct=100.0 * (nbytes / t_s) / bw,
        compute_utilization_pct=100.0 * (flops / t_s) / pf,
        roofline_fraction=t_floor / t_s,
    )


class Profile(BaseModel):
    """Roofline profile of one timed kernel. Unknown numbers are ``None`` with a reason."""

    model_config = ConfigDict(extra="forbid")

    dims: dict[str, int] = Field(default_factory=dict, description="The timed shape.")
    bytes: float | None = Field(None, description="Bytes moved per call (cost model).")
    flops: float | None = Field(None, description="Flops per call (cost model).")
    median_ms: float | None = None
    ai: float | None = Field(None, description="Arithmetic intensity, flop/byte.")
    peak_bandwidth_gbps: float | None = None
    peak_tflops: float | None = None
    peak_tflops_dtype: str | None = Field(None, description="Which calibrated matmul peak is the roof.")
    ridge_ai: float | None = Field(None, description="AI where the two roofs meet, flop/byte.")
    bound: Literal["memory", "compute"] | None = None
    bottleneck: str = ""
    attainable_tflops: float | None = None
    floor_ms: float | None = Field(None, description="Fastest physically possible time.")
    achieved_bandwidth_gbps: float | None = None
    achieved_tflops: float | None = None
    bandwidth_utilization_pct: float | None = None
    compute_utilization_pct: float | None = None
    roofline_fraction: float | None = Field(None, description="Achieved / attainable at this AI.")
    sm_saturation_pct: float | None = Field(
        None, description="Alias of compute_utilization_pct; NOT an SM occupancy measurement.")
    registers_per_thread: int | None = None
    occupancy_pct: float | None = None
    spills_bytes: int | None = None
    anomaly: bool = Field(False, description="Faster than the calibrated roofline.")
    notes: list[str] = Field(default_factory=list)
    unmeasured: dict[str, str] = Field(default_factory=dict)

    def as_tool_fields(self) -> dict[str, Any]:
        """The profile as flat JSON fields for the agent tools."""
        return self.model_dump(mode="json")


def _compute_peak(spec: TaskSpec, peaks: Mapping[str, Any]) -> tuple[float | None, str | None, list[str]]:
    """The matmul peak for the task's first floating output dtype, else the best measured."""
    per = peaks.get("matmul_tflops")
    per = per if isinstance(per, Mapping) else {}
    dtype = next((t.dtype for t in spec.outputs + spec.inputs if t.dtype in _FLOAT_DTYPES), None)
    notes = ["the compute roof is the calibrated matmul peak; non-matmul flops rarely reach it"]
    value = per.get(dtype) if dtype is not None else None
    if isinstance(value, int | float) and value > 0:
        return float(value), dtype, notes
    best = peaks.get("tflops")
    if isinstance(best, int | float) and best > 0:
        name = max(per, key=lambda k: per[k]) if per else "tflops"
        notes.append(f"no calibrated matmul peak for {dtype}; using the best measured ({name})")
        return float(best), name, notes
    return None, None, notes


def _bottleneck(p: RooflinePoint, peak_bw: float, peak_tf: float) -> str:
    if p.roofline_fraction > 1.0:
        return (f"anomaly: {p.roofline_fraction:.2f}x faster than the calibrated roofline allows; "
                "the calibration or the measurement is wrong (not a record)")
    headroom = 1.0 / p.roofline_fraction if p.roofline_fraction > 0 else float("inf")
    ai = "no bytes moved" if p.ai is None else f"AI {p.ai:.3g} flop/B"
    if p.bound == "memory":
        return (f"memory-bound: {ai} is below the ridge {p.ridge_ai:.3g} flop/B; achieved "
                f"{p.achieved_bandwidth_gbps:.4g} GB/s = {p.bandwidth_utilization_pct:.3g}% of the "
                f"calibrated {peak_bw:.4g} GB/s; at most {headroom:.3g}x faster by moving bytes faster")
    return (f"compute-bound: {ai} is at or above the ridge {p.ridge_ai:.3g} flop/B; achieved "
            f"{p.achieved_tflops:.4g} TFLOP/s = {p.compute_utilization_pct:.3g}% of the calibrated "
            f"{peak_tf:.4g} TFLOP/s; at most {headroom:.3g}x faster")


def analyze(spec: TaskSpec, timing: TimingStats | None, peaks: Mapping[str, Any] | None) -> Profile:
    """Roofline profile of ``timing`` (the verified timed shape) for ``spec`` on ``peaks``.

    Never raises for missing inputs: every number it cannot compute is ``None`` with the
    reason in ``unmeasured``.
    """
    prof = Profile(unmeasured={"registers_per_thread": _NO_PROFILER, "occupancy_pct": _NO_PROFILER,
                               "spills_bytes": _NO_PROFILER})
    roofline_keys = ("ai", "peak_bandwidth_gbps", "peak_tflops", "ridge_ai", "bound",
                     "attainable_tflops", "floor_ms", "achieved_bandwidth_gbps", "achieved_tflops",
                     "bandwidth_utilization_pct", "compute_utilization_pct", "roofline_fraction",
                     "sm_saturation_pct")

    def missing(reason: str, keys: tuple[str, ...] = roofline_keys) -> Profile:
        for k in keys:
            if getattr(prof, k) is None:
                prof.unmeasured.setdefault(k, reason)
        prof.bottleneck = prof.bottleneck or f"unknown: {reason}"
        return prof

    if timing is None:
        return missing("no verified timing (the benchmark stage was not reached or failed)")
    prof.dims, prof.median_ms = dict(timing.dims), timing.median_ms
    if spec.cost_model is None:
        return missing("the task has no cost model")
    dims = timing.dims or spec.timed_dims()
    prof.bytes, prof.flops = spec.cost_model.evaluate(dims)
    if prof.bytes > 0:
        prof.ai = prof.flops / prof.bytes
    if timing.median_ms <= 0:
        return missing("the median time is zero")
    if not peaks:
        return missing("no calibrated peaks (run `kgrader calibrate`)")
    bw = peaks.get("bandwidth_gbps")
    peak_tf, dtype, notes = _compute_peak(spec, peaks)
    prof.notes += notes
    if not isinstance(bw, int | float) or bw <= 0 or peak_tf is None:
        return missing("the calibration lacks a bandwidth or a matmul peak")
    point = roofline_point(prof.bytes, prof.flops, timing.median_ms, float(bw), peak_tf)
    prof = prof.model_copy(update={
        **point.model_dump(), "peak_bandwidth_gbps": float(bw), "peak_tflops": peak_tf,
        "peak_tflops_dtype": dtype, "sm_saturation_pct": point.compute_utilization_pct,
        "anomaly": point.roofline_fraction > 1.0, "bottleneck": _bottleneck(point, float(bw), peak_tf),
    })
    if point.ai is None:
        prof.unmeasured["ai"] = "the cost model moves no bytes"
    prof.notes.append("sm_saturation_pct is compute_utilization_pct under another name, not an "
                      "SM-occupancy measurement")
    return prof


def counters_roofline(spec: TaskSpec, dims: Mapping[str, int], kernel_ms: float,
                      peaks: Mapping[str, Any] | None) -> tuple[RooflinePoint | None, str | None]:
    """The roofline of one call whose kernels took ``kernel_ms`` in total (Nsight Compute's
    durations, not the benchmark's median), or ``(None, reason)``."""
    if spec.cost_model is None:
        return None, "the task has no cost model"
    if kernel_ms <= 0:
        return None, "the kernels' duration is zero"
    if not peaks:
        return None, "no calibrated peaks (run `kgrader calibrate`)"
    bw = peaks.get("bandwidth_gbps")
    peak_tf, _, _ = _compute_peak(spec, peaks)
    if not isinstance(bw, int | float) or bw <= 0 or peak_tf is None:
        return None, "the calibration lacks a bandwidth or a matmul peak"
    nbytes, flops = spec.cost_model.evaluate(dict(dims))
    return roofline_point(nbytes, flops, kernel_ms, float(bw), peak_tf), None


def with_counters(prof: Profile, kernels: list[Any], why_not: str | None = None) -> Profile:
    """``prof`` with registers, occupancy and spills of the longest profiled kernel.

    ``kernels`` are :class:`grader.report.diagnostics_model.KernelDiagnostics`; with none, the
    three stay ``None`` and ``why_not`` (the profile's reason) replaces the default one.
    """
    out = prof.model_copy(deep=True)
    timed = [k for k in kernels if k.counters.duration_ms is not None]
    if not timed:
        if why_not:
            for key in ("registers_per_thread", "occupancy_pct", "spills_bytes"):
                out.unmeasured[key] = why_not
        return out
    c = max(timed, key=lambda k: k.counters.duration_ms).counters
    for key, value, src in (("registers_per_thread", c.registers_per_thread, "registers_per_thread"),
                            ("occupancy_pct", c.achieved_occupancy_pct, "achieved_occupancy_pct"),
                            ("spills_bytes", None if c.spill_bytes is None else int(c.spill_bytes),
                             "spill_bytes")):
        setattr(out, key, value)
        if value is None:
            out.unmeasured[key] = c.unmeasured.get(src, "not measured by Nsight Compute")
        else:
            out.unmeasured.pop(key, None)
    if len(kernels) > 1:
        out.notes.append("registers, occupancy and spills are those of the longest kernel")
    return out
