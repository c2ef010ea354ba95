"""Peak calibration inside the sandbox: copy bandwidth and matmul throughput per dtype.

These are the ceilings the roofline uses (grader/measure/profile.py). They are measured, not taken from
datasheets: a large device-to-device copy (bytes read + bytes written over time) and a
large matrix product per dtype, each the median of several timed repetitions.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

_perf = time.perf_counter


def _time(fn: Any, device: str, reps: int) -> float:
    """Median seconds of ``fn`` over ``reps`` runs, after one warm-up run."""
    fn()
    out = []
    for _ in range(reps):
        if device == "cuda":
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            out.append(float(start.elapsed_time(end)) / 1e3)
        else:
            t0 = _perf()
            fn()
            out.append(_perf() - t0)
    return float(statistics.median(out))


def measure_peak(device: str, quick: bool = False) -> dict[str, Any]:
    """Copy bandwidth (GB/s) and matmul TFLOP/s per dtype on ``device``."""
    dev = "cuda" if device == "cuda" else "cpu"
    nbytes = (64 << 20 if quick else 1 << 30) if dev == "cuda" else (16 << 20 if quick else 128 << 20)
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev).random_(0, 255)
    dst = torch.empty_like(src)
    reps = 5 if quick else 20
    t = _time(lambda: dst.copy_(src), dev, reps)
    result: dict[str, Any] = {"bandwidth_gbps": 2 * nbytes / t / 1e9, "copy_bytes": nbytes,
                              "matmul_tflops": {}}
    n = (2048 if quick else 8192) if dev == "cuda" else (256 if quick else 1024)
    dtypes = ["float16", "bfloat16", "float32"] if dev == "cuda" else ["float32"]
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 peak means real fp32, not TF32
    try:
        for name in dtypes:
            dt = getattr(torch, name)
            a = torch.randn(n, n, device=dev).to(dt)
            b = torch.randn(n, n, device=dev).to(dt)
            t = _time(lambda a=a, b=b: torch.matmul(a, b), dev, max(3, reps // 2))
            result["matmul_tflops"][name] = 2 * n**3 / t / 1e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    result["tflops"] = max(result["matmul_tflops"].values())
    result["matmul_n"] = n
    return result
