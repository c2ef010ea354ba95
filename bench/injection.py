"""The calibrated injected slowdown of bench/calibration.py: a measured sweep, verified.

Runs on the GPU host outside any sandbox (the bench's own kernel, timed with CUDA events).
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
from pathlib import Path
from typing import Any


def calibrate_injection(kernel: str, n: int, targets: tuple[float, ...], reps: int = 150) -> dict[str, Any]:
    """Find each target slowdown's knob by measurement, outside the sandbox.

    ``kernel``: the source template of bench/calibration.py (KERNEL). Two knobs: ``spin`` multiply-adds per program, and ``extra`` programs of
    scratch traffic. The honest kernel and a sweep of each knob are timed interleaved with
    CUDA events on a cold L2 (a 256 MiB write, then a 100 us sleep kernel so that the
    launch is queued before the start event), ``reps`` rounds; a setting's effect is the
    ratio of medians minus one. Each target gets, per knob, the setting interpolated between
    the two sweep points around it; every such setting is timed again against the honest
    kernel in a second, independent pass, and the one nearest its target is chosen. The
    decisions then measure the true effect once more, from their own pairs."""
    import importlib.util

    import torch

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "cal_kernel.py"
        f.write_text(kernel.format(spin=0, extra=0))
        spec = importlib.util.spec_from_file_location("cal_kernel", f)
        assert spec is not None and spec.loader is not None
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
    kern = m._scale
    n_main = -(-n // 4096)
    x = torch.rand(n, device="cuda")
    y = torch.empty_like(x)
    scratch = torch.zeros((n_main // 10 + 1) * 4096, device="cuda")  # up to 10% more programs
    scrub = torch.empty(64 << 20, dtype=torch.float32, device="cuda")
    cycles = int(100 * (getattr(torch.cuda.get_device_properties(0), "clock_rate", 0) or 2_000_000) / 1e3)

    def launch(knob: tuple[str, int]) -> None:
        spin, extra = (knob[1], 0) if knob[0] == "spin" else (0, knob[1])
        kern[(n_main + extra,)](x, y, scratch, n, spin, n_main, BLOCK=4096, SPIN=spin > 0)

    def times(knobs: list[tuple[str, int]]) -> dict[tuple[str, int], float]:
        for k in knobs:  # compile and warm
            launch(k)
        torch.cuda.synchronize()
        out: dict[tuple[str, int], list[float]] = {k: [] for k in knobs}
        for r in range(reps):
            for k in (knobs if r % 2 == 0 else knobs[::-1]):
                scrub.zero_()
                torch.cuda._sleep(cycles)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                launch(k)
                b.record()
                b.synchronize()
                out[k].append(a.elapsed_time(b))
        return {k: statistics.median(v) for k, v in out.items()}

    honest = ("spin", 0)
    sweeps = {"spin": [0, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024],
              "extra": sorted({0, *(max(1, round(n_main * p / 1000)) for p in
                                    (2, 4, 6, 8, 10, 12, 15, 20, 25, 30, 40, 60))})}
    knobs = [honest] + [(kn, v) for kn, vs in sweeps.items() for v in vs if v]
    med = times(knobs)
    effect = {k: med[k] / med[honest] - 1 for k in knobs}
    proposals: dict[str, list[tuple[str, int]]] = {}
    for t in targets:
        proposals[f"{t:.3f}"] = []
        for kn, vs in sweeps.items():
            pts = [(v, effect[(kn, v)] if v else 0.0) for v in vs]
            for (lo, elo), (hi, ehi) in itertools.pairwise(pts):
                if elo < t <= ehi:
                    v = max(1, round(lo + (t - elo) / (ehi - elo) * (hi - lo)))
                    proposals[f"{t:.3f}"].append((kn, v))
                    break
    second = sorted({k for ks in proposals.values() for k in ks})
    check = times([honest, *second])
    verified = {k: check[k] / check[honest] - 1 for k in second}
    chosen: dict[str, list[Any] | None] = {}
    for t_s, ks in proposals.items():
        best = min(ks, key=lambda k: abs(verified[k] - float(t_s)), default=None)
        chosen[t_s] = [best[0], best[1], verified[best]] if best else None
    return {"n": n, "programs": n_main, "reps": reps,
            "sweep_median_ms": {f"{k[0]}={k[1]}": v for k, v in med.items()},
            "sweep_effect": {f"{k[0]}={k[1]}": v for k, v in effect.items()},
            "verified_effect": {f"{k[0]}={k[1]}": v for k, v in verified.items()},
            "chosen": chosen}
