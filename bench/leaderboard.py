"""Leaderboard throughput: evaluations per minute against the number of workers.

Usage: python bench/leaderboard.py [--submissions 50] [--workers 1 2] [--quick]

Generates N submissions into a temp folder, each entering vector_add_small, softmax and
matmul with the examples' good / slow / wrong candidate (cycled, and made unique by a
comment so that none is a duplicate), then runs the local engine (CPU, bwrap) once per
worker count on a fresh state with --top-k 0 (the main round only). Reports, per worker
count: wall time, evaluations per minute, and the median wall time of one evaluation by
verdict; the "fixed cost" is the median wall of a ``wrong`` evaluation (sandbox start,
compile, first check, no timing). ``--quick`` = 6 submissions.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from grader.leaderboard.progress import Progress
from grader.leaderboard.runner import RunConfig, run_leaderboard
from grader.leaderboard.state import State

ROOT = Path(__file__).resolve().parent.parent
TASKS = ("vector_add_small", "softmax", "matmul")
KINDS = ("good", "slow", "wrong")


def make_submissions(root: Path, n: int) -> Path:
    for i in range(n):
        folder = root / f"sub{i:03d}"
        folder.mkdir(parents=True)
        for j, task in enumerate(TASKS):
            kind = KINDS[(i + j) % len(KINDS)]
            src = (ROOT / "examples" / task / "candidates" / f"{kind}.py").read_text()
            (folder / f"{task}.py").write_text(f"{src}\n# bench submission {i} ({kind})\n")
    return root


def one(subs: Path, workers: int, work: Path) -> dict[str, float]:
    state = work / f"state-{workers}.sqlite"
    cfg = RunConfig(tasks=[ROOT / "examples" / t for t in TASKS], submissions=subs, state=state,
                    workers=workers, backend="bwrap", device="cpu", top_k=0)
    t0 = time.monotonic()
    summary = run_leaderboard(cfg, Progress(enabled=False))
    wall = time.monotonic() - t0
    with State.open(state, create=False) as st:
        rows = [r for r in st.evaluations() if r.round == "main"]
    by: dict[str, list[float]] = {}
    for r in rows:
        kind = "wrong" if r.code == "wrong_values" else r.verdict
        by.setdefault(kind, []).append(r.wall_s)
    out = {"workers": workers, "evaluations": len(rows), "wall_s": wall,
           "per_min": 60 * len(rows) / wall, "infra_errors": len(summary.infra_errors)}
    for k, v in sorted(by.items()):
        out[f"median_wall_{k}_s"] = statistics.median(v)
        out[f"n_{k}"] = len(v)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submissions", type=int, default=50)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--quick", action="store_true", help="6 submissions")
    a = ap.parse_args()
    n = 6 if a.quick else a.submissions
    os.environ.setdefault("KGRADER_LEADERBOARD_SECRET", "bench-secret-0123456789")
    print(f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()},"
          f" {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; {n} submissions x "
          f"{len(TASKS)} tasks (+{len(TASKS)} reference checks, not counted)")
    work = Path(tempfile.mkdtemp(prefix="kgrader-lb-bench-"))
    try:
        subs = make_submissions(work / "subs", n)
        for w in a.workers:
            r = one(subs, w, work)
            print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in r.items()), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
