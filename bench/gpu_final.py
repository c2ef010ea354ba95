"""One batched GPU session: grades, attacks, acceptance, an honest batch, cold CLI wall.

Run on a GPU host after ``source bench/gpu_env.sh``:
``python3 bench/gpu_final.py OUT_DIR BUDGET_S``. Every evaluation goes through the real
CLI (``kgrader run --backend bwrap --device cuda --json``); one JSON line per evaluation
lands in ``OUT_DIR/results.jsonl`` (name, rc, ok, stage, codes, median, escape, phases,
wall), a summary in ``OUT_DIR/summary.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

RT = "tests/policies/runtime-only.toml"
EX = Path("examples")


def run(name: str, task: str, cand: str, *extra: str) -> dict[str, object]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "grader.cli", "run", task, cand, "--backend", "bwrap",
                        "--device", "cuda", "--json", *extra], capture_output=True, text=True,
                       timeout=300)
    wall = time.monotonic() - t0
    try:
        r = json.loads(p.stdout)
    except ValueError:
        return {"name": name, "rc": p.returncode, "wall_s": wall, "stderr": p.stderr[-1500:]}
    t = r.get("timing") or {}
    a = r.get("acceptance") or {}
    return {"name": name, "rc": p.returncode, "ok": r["ok"], "stage": r["stage"], "wall_s": wall,
            "codes": [(e["stage"], e["code"], e["origin"], e["message"][:240]) for e in r["errors"]],
            "median_ms": t.get("median_ms"), "mode": t.get("mode"), "escape": t.get("escape"),
            "bw": t.get("bandwidth_gbps"), "accepted": a.get("accepted"),
            "improvement": a.get("improvement_fraction"), "replicate": a.get("replicate_speedup"),
            "pairs": a.get("pairs"), "phases": (r.get("sandbox") or {}).get("phases"),
            "warnings": r.get("warnings", [])[:5]}


def main() -> None:
    out, budget = Path(sys.argv[1]), float(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    fixed = [
        ("va_good", "examples/vector_add", "examples/vector_add/candidates/good.py"),
        ("va_wrong", "examples/vector_add", "examples/vector_add/candidates/wrong.py"),
        ("va_no_mask", "examples/vector_add", "examples/vector_add/candidates/no_mask.py"),
        ("sm_good", "examples/softmax", "examples/softmax/candidates/good.py"),
        ("mm_good", "examples/matmul", "examples/matmul/candidates/good.py"),
        ("oob", "examples/vector_add", "tests/attacks/runtime/unmasked_tail_store.py", "--policy", RT),
        ("fallback", "examples/vector_add", "tests/attacks/runtime/torch_fallback_in_except.py",
         "--policy", RT),
        ("side_stream", "examples/vector_add", "tests/attacks/runtime/side_stream.py", "--policy", RT),
        ("timer_patch", "examples/vector_add", "tests/attacks/runtime/timer_patch.py", "--policy", RT),
        ("kill_judge", "examples/vector_add", "tests/attacks/runtime/kill_judge.py", "--policy", RT),
        ("accept_gain", "examples/vector_add", "examples/vector_add/candidates/good.py", "--current",
         "examples/vector_add/candidates/slow.py"),
        ("accept_aa", "examples/vector_add", "examples/vector_add/candidates/good.py", "--current",
         "examples/vector_add/candidates/good.py"),
        ("sigstop_accept", "examples/vector_add", "tests/attacks/runtime/sigstop_other_runner.py",
         "--current", "examples/vector_add/candidates/good.py", "--policy", RT),
    ]
    honest = [(f"honest_{t}_{c}", f"examples/{t}", f"examples/{t}/candidates/{c}.py")
              for t in ("vector_add", "softmax", "matmul", "vector_add_small") for c in ("good", "slow")]
    rows = []
    with (out / "results.jsonl").open("w") as f:
        for job in fixed:
            if time.monotonic() - start > budget:
                break
            rows.append(run(*job))
            f.write(json.dumps(rows[-1]) + "\n")
            f.flush()
            print(json.dumps({k: rows[-1].get(k) for k in ("name", "rc", "ok", "codes", "median_ms",
                                                           "accepted", "wall_s")})[:600], flush=True)
        i = 0
        while time.monotonic() - start < budget:
            rows.append(run(*honest[i % len(honest)]))
            f.write(json.dumps(rows[-1]) + "\n")
            f.flush()
            i += 1
    hon = [r for r in rows if str(r["name"]).startswith("honest_")]
    rejected = [r for r in hon if not r.get("ok")]
    summary = {"evaluations": len(rows), "honest": len(hon), "honest_rejected": len(rejected),
               "rejections": [(r["name"], r.get("codes")) for r in rejected],
               "honest_wall_s_median": sorted(r["wall_s"] for r in hon)[len(hon) // 2] if hon else None}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary)[:2000])


if __name__ == "__main__":
    main()
