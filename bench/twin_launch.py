"""What the twin boundary adds to one Triton launch (sandbox/runner/boundary.py).

Times the same small vector-add launch plainly and through the runner's twins (decoys bound,
arguments rebuilt, the grid evaluated on the decoys, the seal checked, Triton's hooks and
allocator replaced), host wall time per launch, median of ``--n`` after ``--warmup``. On a
machine without a GPU it runs under Triton's interpreter (whose own cost dominates); with
``--device cuda`` the JIT's launch path, synchronised after every launch.

    python3 bench/twin_launch.py [--device cpu|cuda] [--n 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton
    import triton.language as tl

    from sandbox.runner.boundary import Seal
    from sandbox.runner.twin import Twins, install

    twins = Twins()
    install(lambda: twins)

    @triton.jit
    def add(x, y, o, n, B: tl.constexpr):
        i = tl.program_id(0) * B + tl.arange(0, B)
        m = i < n
        tl.store(o + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)

    def launch(x: torch.Tensor, y: torch.Tensor, o: torch.Tensor) -> None:
        add[lambda meta: (triton.cdiv(meta["n"], meta["B"]),)](x, y, o, x.numel(), B=1024)

    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    real = [torch.randn(1024, device=a.device) for _ in range(3)]

    def timed(through_twins: bool) -> list[float]:
        out = []
        for i in range(a.warmup + a.n):
            t0 = time.perf_counter()
            if through_twins:
                launch(*twins.bind("bench", real))
                twins.end()
            else:
                launch(*real)
            sync()
            if i >= a.warmup:
                out.append((time.perf_counter() - t0) * 1e6)
        return out

    plain, twin = timed(False), timed(True)
    seal = Seal()
    t0 = time.perf_counter()
    for _ in range(a.n):
        seal.check()
    row = {"device": a.device, "triton": triton.__version__, "n": a.n,
           "plain_us": round(statistics.median(plain), 1), "twins_us": round(statistics.median(twin), 1),
           "added_us": round(statistics.median(twin) - statistics.median(plain), 1),
           "seal_check_us": round((time.perf_counter() - t0) / a.n * 1e6, 1),
           "load": os.getloadavg()[0]}
    print(json.dumps(row) if a.json else "  ".join(f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
