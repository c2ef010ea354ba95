"""grader/measure/profile.py: roofline classification and scores, and honest unknowns."""

from __future__ import annotations

import math
from typing import Any

import pytest

from grader.measure.profile import analyze, roofline_point
from grader.report.model import TimingStats
from grader.task import TaskSpec

# A device with 1000 GB/s and 100 TFLOP/s: the ridge is at 100 flop/byte.
PEAKS: dict[str, Any] = {"bandwidth_gbps": 1000.0, "tflops": 100.0,
                         "matmul_tflops": {"float16": 100.0, "float32": 50.0}}


def _spec(dtype: str = "float16", bytes_expr: str = "6*N", flops_expr: str = "N",
          cost: bool = True) -> TaskSpec:
    raw: dict[str, Any] = {
        "name": "t", "tensors": [{"name": "x", "role": "input", "dtype": dtype, "shape": ["N"]},
                                 {"name": "out", "role": "output", "dtype": dtype, "shape": ["N"]}],
        "shapes": {"tune": [{"N": 1_000_000}]},
        "correctness": {"seeds": [1], "atol": 0, "rtol": 0},
    }
    if cost:
        raw["cost_model"] = {"bytes": bytes_expr, "flops": flops_expr}
    return TaskSpec.model_validate(raw)


def _timing(median_ms: float, n: int = 1_000_000) -> TimingStats:
    return TimingStats(samples=10, mean_ms=median_ms, median_ms=median_ms, p95_ms=median_ms,
                       std_ms=0.0, min_ms=median_ms, cv=0.0, device="cuda", clock="cuda_event", mode="events",
                       cache="cold", dims={"N": n})


def test_low_intensity_kernel_is_memory_bound_and_scored_on_bandwidth() -> None:
    # 6 MB in 0.012 ms = 500 GB/s = half the bandwidth roof.
    prof = analyze(_spec(), _timing(0.012), PEAKS)
    assert prof.bound == "memory"
    assert prof.ai == pytest.approx(1 / 6)
    assert prof.ridge_ai == pytest.approx(100.0)
    assert prof.bandwidth_utilization_pct == pytest.approx(50.0)
    assert prof.roofline_fraction == pytest.approx(0.5)
    assert prof.floor_ms == pytest.approx(0.006)
    assert prof.bottleneck.startswith("memory-bound")
    assert not prof.anomaly


def test_high_intensity_kernel_is_compute_bound_and_scored_on_flops() -> None:
    # 1 MB and 1e12 flops: AI 1e6 >> ridge; 1e12 flop in 20 ms = 50 TFLOP/s = half the roof.
    spec = _spec(bytes_expr="N", flops_expr="N*1000000")
    prof = analyze(spec, _timing(20.0), PEAKS)
    assert prof.bound == "compute"
    assert prof.achieved_tflops == pytest.approx(50.0)
    assert prof.compute_utilization_pct == pytest.approx(50.0)
    assert prof.roofline_fraction == pytest.approx(0.5)
    assert prof.attainable_tflops == pytest.approx(100.0)
    assert prof.bottleneck.startswith("compute-bound")


def test_sm_saturation_is_only_an_alias_of_compute_utilisation() -> None:
    prof = analyze(_spec(), _timing(0.012), PEAKS)
    assert prof.sm_saturation_pct == prof.compute_utilization_pct
    assert "not an sm" in (type(prof).model_fields["sm_saturation_pct"].description or "").lower()


def test_roofline_fraction_equals_achieved_over_attainable() -> None:
    p = roofline_point(nbytes=8e6, flops=4e8, median_ms=0.1, peak_bandwidth_gbps=1000, peak_tflops=100)
    assert p.ai == pytest.approx(50.0)
    assert p.bound == "memory"
    assert p.attainable_tflops is not None
    assert p.attainable_tflops == pytest.approx(50.0)  # ai * bandwidth = 50 TFLOP/s
    assert p.roofline_fraction == pytest.approx(p.achieved_tflops / p.attainable_tflops)


def test_pure_copy_without_flops_still_gets_a_fraction() -> None:
    p = roofline_point(nbytes=1e9, flops=0, median_ms=2.0, peak_bandwidth_gbps=1000, peak_tflops=100)
    assert p.ai == 0 and p.bound == "memory"
    assert p.roofline_fraction == pytest.approx(0.5)


def test_faster_than_the_roofline_is_an_anomaly_not_a_record() -> None:
    prof = analyze(_spec(), _timing(0.001), PEAKS)  # 6 MB in 1 us = 6 TB/s > 1 TB/s
    assert prof.anomaly
    assert prof.roofline_fraction is not None and prof.roofline_fraction > 1
    assert prof.bottleneck.startswith("anomaly")


def test_hardware_counters_are_null_with_a_reason() -> None:
    prof = analyze(_spec(), _timing(0.012), PEAKS)
    for k in ("registers_per_thread", "occupancy_pct", "spills_bytes"):
        assert getattr(prof, k) is None
        assert "profiler" in prof.unmeasured[k]


def test_without_peaks_roofline_fields_are_null_with_reason() -> None:
    prof = analyze(_spec(), _timing(0.012), None)
    assert prof.ai == pytest.approx(1 / 6)  # the cost model alone still gives the AI
    assert prof.bound is None and prof.roofline_fraction is None
    assert "calibrate" in prof.unmeasured["roofline_fraction"]
    assert "ai" not in prof.unmeasured


def test_without_timing_or_cost_model_nothing_is_guessed() -> None:
    no_timing = analyze(_spec(), None, PEAKS)
    assert no_timing.ai is None and "timing" in no_timing.unmeasured["ai"]
    no_cost = analyze(_spec(cost=False), _timing(1.0), PEAKS)
    assert no_cost.bytes is None and "cost model" in no_cost.unmeasured["bound"]


def test_compute_roof_uses_the_task_dtype_else_the_best_measured() -> None:
    assert analyze(_spec("float32"), _timing(0.012), PEAKS).peak_tflops == 50.0
    bf16 = analyze(_spec("bfloat16"), _timing(0.012), PEAKS)
    assert bf16.peak_tflops == 100.0 and bf16.peak_tflops_dtype == "float16"
    assert any("no calibrated matmul peak for bfloat16" in n for n in bf16.notes)


def test_profile_is_plain_json() -> None:
    fields = analyze(_spec(), _timing(0.012), PEAKS).as_tool_fields()
    assert isinstance(fields["unmeasured"], dict)
    assert all(isinstance(v, str | int | float | bool | list | dict | type(None)) for v in fields.values())
    assert not math.isnan(fields["roofline_fraction"])


def test_roofline_point_rejects_nonsense_inputs() -> None:
    with pytest.raises(ValueError):
        roofline_point(1.0, 1.0, 0.0, 1.0, 1.0)
