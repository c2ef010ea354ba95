#!/usr/bin/env python3
"""Fixed cost of one sandbox per backend, with a trivial command, beside a plain subprocess.

For each backend, ``--runs`` times: the sandboxed command prints the host clock when it
starts and again just before it exits. From the host's own clock around ``backend.run``:

* start-up  = first line's timestamp - the moment run() was called
* teardown  = the moment run() returned - the last line's timestamp
* total     = run() wall time

The floor is ``python3 -c pass`` as a plain subprocess. A second figure per backend is
the fixed cost of a whole evaluation that stops after the compile stage (scan, staging,
judge and runner start, torch and Triton import, one launch of
``examples/vector_add_small/candidates/good.py`` on the CPU). Medians are printed and
written as JSON (``--out``).

Usage: python bench/sandbox_overhead.py --backends bwrap,docker --runs 10 --out FILE
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.backends.base import SandboxSpec  # noqa: E402
from grader.backends.select import select_backend  # noqa: E402
from grader.limits import Limits  # noqa: E402

PROBE = "import time; print(time.time(), flush=True); print(time.time(), flush=True)"


def one(backend_name: str) -> dict[str, float]:
    be = select_backend(backend_name, "cpu")
    with tempfile.TemporaryDirectory() as d:
        in_dir, out_dir = Path(d, "in"), Path(d, "out")
        in_dir.mkdir()
        out_dir.mkdir()
        out_dir.chmod(0o777)
        spec = SandboxSpec(in_dir=in_dir, out_dir=out_dir, argv=("python3", "-c", PROBE),
                           limits=Limits(compile_s=30, run_s=30))
        t0 = time.time()
        outcome = be.run(spec)
        t1 = time.time()
    lines = outcome.stdout.decode().split()
    first, last = float(lines[0]), float(lines[-1])
    return {"startup_s": first - t0, "teardown_s": t1 - last, "total_s": t1 - t0}


def evaluation(backend_name: str) -> float:
    from grader.evaluate import EvalRequest, evaluate

    task = ROOT / "examples" / "vector_add_small"
    t0 = time.time()
    r = evaluate(EvalRequest.from_paths(task_dir=task, candidate=task / "candidates" / "good.py",
                             backend=backend_name, device="cpu", stages=("compile",),
                             shape_kinds=("tune",)))
    assert r.ok, r.errors
    return time.time() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="bwrap,docker")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    res: dict[str, dict[str, float]] = {}
    floor = []
    for _ in range(a.runs):
        t0 = time.time()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        floor.append(time.time() - t0)
    res["python -c pass (floor)"] = {"total_s": statistics.median(floor)}
    for name in a.backends.split(","):
        one(name)  # warm caches once, not counted
        runs = [one(name) for _ in range(a.runs)]
        res[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        evaluation(name)
        res[name]["evaluation_compile_only_s"] = statistics.median(evaluation(name) for _ in range(a.runs))
    print(f"{'':24} {'start-up':>10} {'teardown':>10} {'total':>10} {'evaluation':>11}"
          f"   (median of {a.runs}, seconds)")
    nan = float("nan")
    for name, r in res.items():
        print(f"{name:24} {r.get('startup_s', nan):10.3f} {r.get('teardown_s', nan):10.3f} "
              f"{r['total_s']:10.3f} {r.get('evaluation_compile_only_s', nan):11.3f}")
    if a.out:
        a.out.write_text(json.dumps({"runs": a.runs, "medians": res,
                                     "date": time.strftime("%Y-%m-%d")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
