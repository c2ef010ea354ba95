#!/usr/bin/env python3
"""Does preparing the next evaluation disturb the current one's measurement?

``kgrader leaderboard run --prepare-ahead`` starts the next evaluation's sandbox while the
current one measures on the same GPU: its judge and five runners import torch and build
Triton's C helper (CPU, file and memory traffic; no device work until the grant). This
bench times A/A decisions (the same kernel as current and candidate, calibrate mode, the
real sandbox and judge) in alternating blocks, with that preparation load off and on, and
compares false accepts, the 95% spread of the speed-up at 100 pairs, and the per-pair
noise.

The load is ``--load-procs`` processes (default 6: a judge and five runners) each importing
torch and Triton and building Triton's helper into a fresh cache, restarted as soon as it
ends, so that a preparation is always under way (with paired timing a GPU's evaluations
take ~4-5 s after the grant and a preparation ~4-6 s). It runs outside any sandbox, with
``CUDA_VISIBLE_DEVICES`` empty: it cannot touch the GPU.

Usage (GPU host): python3 bench/prepare_disturbance.py --workload 100us --blocks 4 \\
                      --block-s 60 --out bench/results/prepare-disturbance.json
Quick CPU check:  python3 bench/prepare_disturbance.py --device cpu --quick --out /tmp/pd.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from calibration import analyse, decide, make_task, source  # noqa: E402

from grader.task import load_task  # noqa: E402

# What a runner does before it is given a module: import torch, then sandbox.runner.main's own
# Triton preparation (a judge's import is the same torch import).
PREPARE = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
           "from sandbox.runner.prepare import prepare_triton\n"
           "prepare_triton('cuda')\n")


class Load:
    """``n`` preparation-like processes, each restarted when it ends, until stopped."""

    def __init__(self, n: int) -> None:
        self.n, self.cycles = n, 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(n)]

    def _loop(self) -> None:
        while not self._stop.is_set():
            with tempfile.TemporaryDirectory(prefix="kg-prep-") as d:
                env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_CACHE_DIR": d}
                subprocess.run([sys.executable, "-c", PREPARE], env=env, check=False,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.cycles += 1

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()


def per_pair_noise(decisions: list[dict[str, list[float]]]) -> float | None:
    """Standard deviation of ln(t_cur / t_cand) over all pairs, in percent."""
    d = [math.log(c / k) for x in decisions for c, k in zip(x["t_cur"], x["t_cand"], strict=True)
         if c > 0 and k > 0]
    return statistics.pstdev(d) * 100 if len(d) > 1 else None


def block(spec_ref: tuple[Any, str], device: str, backend: str, seconds: float, pairs: int,
          max_decisions: int) -> tuple[list[dict[str, list[float]]], list[str]]:
    """One calibrate-mode sandbox, one pair of runners: A/A decisions for ``seconds``."""
    spec, ref = spec_ref
    files = {"a.py": source("honest"), "a2.py": source("honest")}
    sc = [{"name": "aa", "current": "/kg/in/a.py", "candidate": "/kg/in/a2.py",
           "decisions": max_decisions, "pairs": pairs, "budget_s": seconds}]
    cal, errors, _ = decide(sc, files, spec, ref, device=device, backend=backend, fresh=False,
                            budget_s=seconds + 60)
    return list(cal["aa"]["decisions"]), [f"{e['code']}: {e['message'][:200]}" for e in errors]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--backend", default="bwrap")
    ap.add_argument("--workload", choices=["10us", "100us", "1ms"], default="100us")
    ap.add_argument("--blocks", type=int, default=4, help="blocks, alternating off/on")
    ap.add_argument("--block-s", type=float, default=60.0, help="seconds of decisions per block")
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--load-procs", type=int, default=6)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (CPU check)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    n = {"10us": 1 << 22, "100us": 1 << 25, "1ms": 1 << 29}[a.workload]
    if a.quick:
        n, a.pairs, a.blocks, a.block_s, a.load_procs = 1 << 12, 30, 2, 8.0, min(a.load_procs, 2)
    tmp = Path(tempfile.mkdtemp(prefix="kg-pd-"))
    spec_ref = load_task(make_task(tmp, f"pd_{a.workload}", n,
                                   {"warmup": 10, "samples": 25, "reps": 5, "cache": "cold"}, check=0.05))
    res: dict[str, Any] = {"argv": sys.argv, "device": a.device, "workload": a.workload, "N": n,
                           "load_procs": a.load_procs, "blocks": [],
                           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    for i in range(a.blocks):
        on = i % 2 == 1
        t0 = time.monotonic()
        if on:
            with Load(a.load_procs) as load:
                decs, errors = block(spec_ref, a.device, a.backend, a.block_s, a.pairs, 10_000)
            cycles = load.cycles
        else:
            decs, errors = block(spec_ref, a.device, a.backend, a.block_s, a.pairs, 10_000)
            cycles = 0
        res["blocks"].append({"load": on, "seconds": round(time.monotonic() - t0, 1),
                              "load_cycles": cycles, "errors": errors, "raw": decs})
        a.out.write_text(json.dumps(res))
    for on in (False, True):
        decs = [d for b in res["blocks"] if b["load"] == on for d in b["raw"]]
        res["load_on" if on else "load_off"] = {**analyse(decs, 0.01, 0.01),
                                                "per_pair_noise_pct": per_pair_noise(decs)}
    res["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    a.out.write_text(json.dumps(res))
    for key in ("load_off", "load_on"):
        r = res[key]
        print(f"{key}: decisions={r['decisions']} controlled={r['controlled_accept_rate']} "
              f"gain={r['gain_rule_accept_rate']} seed={r['seed_accept_rate']} "
              f"spread95={r['speedup_at_100_pairs_p97.5'] and r['speedup_spread_95_pct']} "
              f"noise={r['per_pair_noise_pct']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
