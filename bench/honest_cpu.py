"""Honest evaluations on a loaded CPU: does any anti-cheat check reject honest code?

Usage: ``python3 bench/honest_cpu.py [--n 100] [--parallel 2] [--json OUT]``. Runs N
``kgrader run --backend bwrap --device cpu --json`` evaluations of the examples' honest
candidates (``good`` and ``slow`` of vector_add_small, cycled), PARALLEL at a time -- two
on a two-core machine keep both cores busy with another evaluation, the load the issue
names. Every evaluation must pass: any failure is listed with its code (a
``work_escaped_timing``, ``background_thread``, ``timing_inconsistent``... on honest code
is a false rejection). Prints a summary; ``--json`` keeps every row.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "examples" / "vector_add_small"
KINDS = ("good", "slow")


def one(i: int) -> dict[str, Any]:
    cand = TASK / "candidates" / f"{KINDS[i % len(KINDS)]}.py"
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "grader.cli", "run", str(TASK), str(cand), "--backend",
                        "bwrap", "--device", "cpu", "--json"], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    row: dict[str, Any] = {"i": i, "candidate": cand.name, "rc": p.returncode,
                           "wall_s": round(time.monotonic() - t0, 3), "load": os.getloadavg()[0]}
    try:
        r = json.loads(p.stdout)
    except ValueError:
        row["unparsed"] = (p.stdout + p.stderr)[-800:]
        return row
    esc = (r.get("timing") or {}).get("escape") or {}
    row.update(ok=r["ok"], codes=[(e["stage"], e["code"], e["message"][:200]) for e in r["errors"]],
               median_ms=(r.get("timing") or {}).get("median_ms"), hidden_ms=esc.get("hidden_ms"),
               budget_ms=esc.get("budget_ms"))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    with ThreadPoolExecutor(a.parallel) as pool:
        rows = list(pool.map(one, range(a.n)))
    bad = [r for r in rows if not r.get("ok")]
    ratios = [r["hidden_ms"] / r["budget_ms"] for r in rows if r.get("budget_ms")]
    summary = {"started": started, "argv": sys.argv, "cores": os.cpu_count(), "evaluations": len(rows),
               "parallel": a.parallel, "wall_s": round(time.monotonic() - t0, 1), "rejected": len(bad),
               "rejections": [(r["i"], r["candidate"], r.get("codes") or r.get("unparsed")) for r in bad],
               "max_hidden_over_budget": max(ratios) if ratios else None,
               "median_wall_s": sorted(r["wall_s"] for r in rows)[len(rows) // 2] if rows else None}
    print(json.dumps(summary, indent=1))
    if a.json:
        a.json.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
