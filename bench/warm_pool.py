"""Cold `kgrader run` against a warm pool's evaluation of the same, side by side in one run.

Usage: python bench/warm_pool.py [--device cpu|cuda] [--task DIR] [--candidate FILE]
[--rounds 3] [--mix N] [--pool-size 2] [--refill-while-busy on|off] [--json OUT]

Latency (every run): ``--rounds`` times, alternating which goes first, the wall time of a
cold ``kgrader run TASK CANDIDATE --backend bwrap --json`` (a fresh process: CLI, sandbox,
torch imports, everything) and of a warm evaluation of the same request through
:class:`grader.pool.Pool` (submission to report; the pool is ready, refilled and idle
before each figure, cold and warm alike, so neither measures beside a sandbox's start).
Prints the medians, the ratio warm/cold and where the warm evaluation's time went.

Throughput (``--mix N``): N plain evaluations (compile, correctness, benchmark) of the
examples' mix -- good, slow and wrong of vector_add, softmax and matmul (the CPU:
vector_add_small) -- one after another through one pool per task (``--pool-size`` each,
refilled in the background, one measurement gate for the device), as one worker per GPU
would. Prints evaluations per minute, verdicts and honest rejections.

Default task: examples/vector_add on CUDA; on the CPU examples/vector_add_small, since
examples/vector_add is sized for a GPU (its benchmark stage runs out of its 300 s in the
Triton interpreter). Targets (issue 24): CPU warm <= 0.5x cold; H200 warm <= 2 s, cold <= 5 s,
>= 30 evaluations/min on the mix.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.backends.gate import MeasureGate  # noqa: E402
from grader.evaluate import EvalRequest  # noqa: E402
from grader.pool import Pool  # noqa: E402
from grader.report.model import Report  # noqa: E402

MIX_TASKS = {"cpu": ("vector_add_small", "softmax", "matmul"),
             "cuda": ("vector_add", "softmax", "matmul")}
MIX_KINDS = ("good", "slow", "wrong")
GPU_COMMAND = ("python3 bench/warm_pool.py --device cuda --rounds 5 --mix 60 --pool-size 2 "
               "--refill-while-busy on --json bench/results/warm_pool_h200.json")


def _request(task: Path, candidate: Path, device: str) -> EvalRequest:
    return EvalRequest.from_paths(task, candidate, backend="bwrap", device=device)


def cold_run(task: Path, candidate: Path, device: str) -> tuple[float, dict[str, Any]]:
    """One cold `kgrader run` in a fresh process: its wall time and its report."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "grader.cli", "run", str(task), str(candidate),
                           "--backend", "bwrap", "--device", device, "--json"],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.monotonic() - t0
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        report = {"ok": False, "error": proc.stderr[-600:]}
    return wall, report


def warm_run(pool: Pool, req: EvalRequest) -> tuple[float, Report]:
    t0 = time.monotonic()
    report = pool.evaluate(req)
    return time.monotonic() - t0, report


STAGE_PHASES = ("compile", "correctness", "benchmark", "accept")


def _stage_s(phases: dict[str, float] | None) -> float:
    return sum(float((phases or {}).get(k, 0.0)) for k in STAGE_PHASES)


def latency(args: argparse.Namespace, task: Path, candidate: Path) -> dict[str, Any]:
    req = _request(task, candidate, args.device)
    cold: list[float] = []
    warm: list[float] = []
    rows: list[dict[str, Any]] = []
    with Pool(req, size=1, refill_while_busy=args.refill_while_busy == "on") as pool:
        for i in range(args.rounds):
            for kind in (("cold", "warm") if i % 2 == 0 else ("warm", "cold")):
                if not pool.wait_ready(timeout=600):
                    raise SystemExit(f"the pool did not become ready: {pool.last_failure}")
                if kind == "cold":
                    wall, rep = cold_run(task, candidate, args.device)
                    cold.append(wall)
                    rows.append({"kind": "cold", "round": i, "wall_s": round(wall, 3),
                                 "ok": rep.get("ok"),
                                 "phases": (rep.get("sandbox") or {}).get("phases")})
                else:
                    wall, report = warm_run(pool, req)
                    warm.append(wall)
                    rows.append({"kind": "warm", "round": i, "wall_s": round(wall, 3),
                                 "ok": report.ok,
                                 "phases": report.sandbox.phases if report.sandbox else None})
                print(f"  round {i} {kind}: {rows[-1]['wall_s']:.2f} s ok={rows[-1]['ok']}",
                      flush=True)
        stats = pool.stats
    outside = {k: [r["wall_s"] - _stage_s(r["phases"]) for r in rows if r["kind"] == k]
               for k in ("cold", "warm")}
    out = {"cold_median_s": round(statistics.median(cold), 3),
           # the wall time outside the candidate's stages (start-up, staging, teardown, CLI):
           # what a warm sandbox can save; the stages themselves are the same work
           "cold_outside_stages_median_s": round(statistics.median(outside["cold"]), 3),
           "warm_outside_stages_median_s": round(statistics.median(outside["warm"]), 3),
           "warm_median_s": round(statistics.median(warm), 3),
           "ratio_warm_over_cold": round(statistics.median(warm) / statistics.median(cold), 3),
           "cold_s": [round(x, 3) for x in cold], "warm_s": [round(x, 3) for x in warm],
           "pool": stats.__dict__, "rows": rows}
    return out


def mix(args: argparse.Namespace) -> dict[str, Any]:
    gate = MeasureGate("device0")
    tasks = MIX_TASKS["cuda" if args.device == "cuda" else "cpu"]
    pools = {t: Pool(_request(ROOT / "examples" / t, ROOT / "examples" / t / "candidates" /
                              "good.py", args.device), size=args.pool_size, gate=gate,
                     refill_while_busy=args.refill_while_busy == "on") for t in tasks}
    try:
        for p in pools.values():
            p.wait_ready(timeout=900)
        jobs = [(tasks[i % len(tasks)], MIX_KINDS[(i // len(tasks)) % len(MIX_KINDS)])
                for i in range(args.mix)]
        verdicts: dict[str, int] = {}
        honest_rejected: list[str] = []
        walls: list[float] = []
        t0 = time.monotonic()
        for task, kind in jobs:
            t_dir = ROOT / "examples" / task
            wall, report = warm_run(pools[task], _request(t_dir, t_dir / "candidates" /
                                                          f"{kind}.py", args.device))
            walls.append(wall)
            verdict = "ok" if report.ok else (report.errors[0].code if report.errors else "?")
            verdicts[f"{task}/{kind}:{verdict}"] = verdicts.get(f"{task}/{kind}:{verdict}", 0) + 1
            if kind in ("good", "slow") and not report.ok:
                honest_rejected.append(f"{task}/{kind}: {verdict}")
        span = time.monotonic() - t0
    finally:
        for p in pools.values():
            p.close()
    return {"evaluations": len(jobs), "span_s": round(span, 2),
            "per_minute": round(60 * len(jobs) / span, 2),
            "median_wall_s": round(statistics.median(walls), 3), "verdicts": verdicts,
            "honest_rejected": honest_rejected,
            "pools": {t: p.stats.__dict__ for t, p in pools.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--task", type=Path)
    ap.add_argument("--candidate", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mix", type=int, default=0)
    ap.add_argument("--pool-size", type=int, default=2)
    ap.add_argument("--refill-while-busy", choices=("on", "off"), default=None,
                    help="default: off on the CPU (2 cores), on on CUDA")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.refill_while_busy is None:
        args.refill_while_busy = "on" if args.device == "cuda" else "off"
    task = args.task or ROOT / "examples" / ("vector_add" if args.device == "cuda"
                                             else "vector_add_small")
    candidate = args.candidate or task / "candidates" / "good.py"
    meta = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
            "cpus": os.cpu_count(), "load_avg": os.getloadavg(), "device": args.device,
            "task": str(task.relative_to(ROOT)) if task.is_relative_to(ROOT) else str(task),
            "candidate": candidate.name, "refill_while_busy": args.refill_while_busy,
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                     capture_output=True, text=True).stdout.strip()}
    print(f"latency: {args.rounds} rounds of cold `kgrader run` vs warm, {meta['task']} "
          f"{candidate.name} on {args.device}", flush=True)
    result: dict[str, Any] = {"meta": meta, "latency": latency(args, task, candidate)}
    lat = result["latency"]
    print(f"cold median {lat['cold_median_s']:.2f} s, warm median {lat['warm_median_s']:.2f} s, "
          f"warm/cold {lat['ratio_warm_over_cold']:.3f}; outside the candidate's stages: cold "
          f"{lat['cold_outside_stages_median_s']:.2f} s, warm {lat['warm_outside_stages_median_s']:.2f} s")
    if args.mix:
        print(f"throughput: {args.mix} evaluations of the examples' mix through warm pools",
              flush=True)
        result["mix"] = mix(args)
        m = result["mix"]
        print(f"{m['per_minute']:.1f} evaluations/min (median {m['median_wall_s']:.2f} s), "
              f"honest rejections: {len(m['honest_rejected'])}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    if args.device == "cpu":
        print(f"on the H200 (bwrap, as root): {GPU_COMMAND}")


if __name__ == "__main__":
    main()
