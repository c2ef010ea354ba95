"""Leaderboard throughput: evaluations per minute against the number of workers.

Usage: python bench/leaderboard.py [--submissions 50] [--workers 1 2] [--quick]
[--device cpu|cuda] [--kinds good slow wrong] [--prepare-ahead off|on|both] [--json OUT]

Generates N submissions into a temp folder, each entering three example tasks
(vector_add_small, softmax, matmul on the CPU; vector_add, softmax, matmul on CUDA) with
the examples' candidates of ``--kinds`` (cycled, and made unique by a comment so that none
is a duplicate), then runs the local engine (bwrap; on CUDA one worker per GPU, each
sandbox pinned to its GPU) once per worker count on a fresh state with --top-k 0 (the main
round only). Reports, per worker count: wall time, evaluations per minute, the median wall
time of one evaluation by verdict, the honest (good/slow) evaluations any check rejected,
and, on CUDA, which GPU each evaluation's judge saw (uuid, visible device count, device
nodes) -- the proof that each sandbox saw only its own GPU. ``--json`` writes every row.
``--quick`` = 6 submissions. ``--prepare-ahead both`` runs each worker count with the
next evaluation prepared while one measures (grader.backends.gate) and without, and
reports per task and kind the spread of the measured times and speed-ups, so that a
disturbance of the measurement by the preparing sandbox would show.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grader.leaderboard.progress import Progress
from grader.leaderboard.runner import RunConfig, run_leaderboard
from grader.leaderboard.state import State

ROOT = Path(__file__).resolve().parent.parent
TASKS = {"cpu": ("vector_add_small", "softmax", "matmul"), "cuda": ("vector_add", "softmax", "matmul")}
KINDS = ("good", "slow", "wrong")


def make_submissions(root: Path, n: int, tasks: tuple[str, ...], kinds: tuple[str, ...]) -> dict[str, str]:
    """Write the submissions; return {"<submission>/<task>": kind}."""
    made: dict[str, str] = {}
    for i in range(n):
        folder = root / f"sub{i:03d}"
        folder.mkdir(parents=True)
        for j, task in enumerate(tasks):
            kind = kinds[(i + j) % len(kinds)]
            src = (ROOT / "examples" / task / "candidates" / f"{kind}.py").read_text()
            (folder / f"{task}.py").write_text(f"{src}\n# bench submission {i} ({kind})\n")
            made[f"{folder.name}/{task}"] = kind
    return made


def _seen(report_json: str | None) -> dict[str, object]:
    """The GPU the judge saw and where the evaluation's time went (sandbox phases)."""
    try:
        r = json.loads(report_json or "{}")
    except ValueError:
        return {}
    env = r.get("environment") or {}
    return {**{k: env.get(k) for k in ("device_uuid", "visible_devices", "device_nodes")},
            "phases": (r.get("sandbox") or {}).get("phases")}


def one(subs: Path, kinds: dict[str, str], workers: int, work: Path, device: str,
        tasks: tuple[str, ...], ahead: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    state = work / f"state-{workers}-{'ahead' if ahead else 'plain'}.sqlite"
    cfg = RunConfig(tasks=[ROOT / "examples" / t for t in tasks], submissions=subs, state=state,
                    workers=workers, backend="bwrap", device=device, top_k=0,
                    prepare_ahead=ahead)
    t0 = time.monotonic()
    summary = run_leaderboard(cfg, Progress(enabled=False))
    out, detail = summarise(state, kinds, workers, device, time.monotonic() - t0)
    out["prepare_ahead"] = ahead
    out["infra_errors"] = len(summary.infra_errors)
    out["infra_error_messages"] = [m[:300] for m in summary.infra_errors[:5]]
    return out, detail


def spread(detail: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per task/kind: n, median time, and the relative spread (stdev/median and the IQR over
    the median) of the submission's measured time and of its speed-up over the reference."""
    out: dict[str, dict[str, float]] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    for d in detail:
        if d["verdict"] == "ok" and d.get("t_sub_ms"):
            groups.setdefault(f"{d['task']}/{d['kind']}", []).append(d)
    for key, ds in sorted(groups.items()):
        row: dict[str, float] = {"n": len(ds)}
        for field in ("t_sub_ms", "speedup"):
            xs = sorted(float(d[field]) for d in ds if d.get(field))
            if len(xs) < 4 or statistics.median(xs) <= 0:
                continue
            med = statistics.median(xs)
            q = statistics.quantiles(xs, n=4)
            row[f"{field}_median"] = round(med, 5)
            row[f"{field}_rel_stdev"] = round(statistics.stdev(xs) / med, 5)
            row[f"{field}_rel_iqr"] = round((q[2] - q[0]) / med, 5)
        out[key] = row
    return out


def summarise(state: Path, kinds: dict[str, str], workers: int, device: str,
              wall: float | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Figures and rows from a (possibly unfinished) run's state file."""
    with State.open(state, create=False) as st:
        rows = [r for r in st.evaluations() if r.round == "main"]
    by: dict[str, list[float]] = {}
    detail: list[dict[str, Any]] = []
    for r in rows:
        kind = "wrong" if r.code == "wrong_values" else r.verdict
        by.setdefault(kind, []).append(r.wall_s)
        detail.append({"submission": r.submission, "task": r.task, "kind": kinds.get(f"{r.submission}/{r.task}"),
                       "verdict": r.verdict, "stage": r.stage, "code": r.code, "message": r.message[:300],
                       "wall_s": r.wall_s, "speedup": r.speedup, "t_sub_ms": r.t_sub_ms,
                       **_seen(r.report_json)})
    honest = [d for d in detail if d["kind"] in ("good", "slow")]
    rejected = [d for d in honest if d["verdict"] != "ok"]
    if wall is None:  # stopped: the span of the finished evaluations' own walls
        wall = sum(float(d["wall_s"]) for d in detail) / max(1, workers)
    out: dict[str, Any] = {
        "workers": workers, "evaluations": len(rows), "wall_s": wall,
        "per_min": 60 * len(rows) / wall if wall else 0.0,
        "honest": len(honest), "honest_rejected": len(rejected),
        "honest_rejections": [(d["submission"], d["task"], d["code"], d["message"][:160]) for d in rejected]}
    if device == "cuda":
        out["gpus_seen"] = sorted({str(d.get("device_uuid")) for d in detail})
        out["visible_devices_seen"] = sorted({str(d.get("visible_devices")) for d in detail})
        out["device_nodes_seen"] = sorted({str(d.get("device_nodes")) for d in detail})
    for k, v in sorted(by.items()):
        out[f"median_wall_{k}_s"] = statistics.median(v)
        out[f"n_{k}"] = len(v)
    return out, detail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submissions", type=int, default=50)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--quick", action="store_true", help="6 submissions")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    ap.add_argument("--json", type=Path, default=None, help="write summary and every row here")
    ap.add_argument("--prepare-ahead", choices=["off", "on", "both"], default="off")
    a = ap.parse_args()
    n = 6 if a.quick else a.submissions
    tasks = TASKS[a.device]
    os.environ.setdefault("KGRADER_LEADERBOARD_SECRET", "bench-secret-0123456789")
    print(f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()},"
          f" {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; {n} submissions x "
          f"{len(tasks)} tasks (+{len(tasks)} reference checks, not counted)")
    work = Path(tempfile.mkdtemp(prefix="kgrader-lb-bench-"))
    # Stopped by `timeout` (SIGTERM): unwind, so that the rows of what finished are written.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        kinds = make_submissions(work / "subs", n, tasks, tuple(a.kinds))
        results = []
        modes = {"off": [False], "on": [True], "both": [True, False]}[a.prepare_ahead]
        for w, ahead in [(w, m) for w in a.workers for m in modes]:
            t_run = time.monotonic()
            try:
                r, detail = one(work / "subs", kinds, w, work, a.device, tasks, ahead)
            except KeyboardInterrupt:  # report the evaluations that finished, marked partial
                name = f"state-{w}-{'ahead' if ahead else 'plain'}.sqlite"
                # the run's own span (reference checks included): with --prepare-ahead two
                # evaluations per GPU overlap, so the sum of their walls would overstate it
                r, detail = summarise(work / name, kinds, w, a.device, time.monotonic() - t_run)
                r["partial"], r["prepare_ahead"] = True, ahead
            r["spread"] = spread(detail)
            results.append({"summary": r, "rows": detail})
            print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in r.items()), flush=True)
            if a.json:
                a.json.write_text(json.dumps({"argv": sys.argv, "device": a.device, "tasks": tasks,
                                              "submissions": n, "results": results}, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
