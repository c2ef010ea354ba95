"""Honest GPU gradings beside another job that fills and keeps busy the same GPU.

Issue 42, item 5: an operator's GPU shared with other jobs must give "not measurable now"
(``timing_unreliable``, ``foreign_gpu_process``, ``device_out_of_memory``: infrastructure,
retried), never a cheat's verdict and never a traceback. This is the measurement, run by
``bench/gpu_shared.sh`` on a GPU host (an H200):

* ``hog``: the other job (plain torch, outside any sandbox): fills ``--fill`` of the GPU's
  memory and runs a loop of matmuls on it until killed; writes its figures to ``--ready``.
* ``top``: a second process that takes all but ``--leave-mib`` of what is still free and
  holds it (the device full), until killed.
* ``table``: reads the gradings' JSON reports (``--runs``, a JSON-lines index written by the
  shell script) and prints one row each (verdict, codes, origins, whether any message or
  warning holds a traceback, whether a candidate was blamed), then the totals; writes the
  rows and the totals as JSON lines to ``--out``.

Standard library and torch only; it imports nothing of kgrader's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

# Verdicts that blame the candidate: on an honest kernel each is a wrong verdict.
CHEAT_HINTS = ("work_", "timing_inconsistent", "gpu_busy_between_calls", "below_roofline_floor",
               "runner_spawned_process", "background_thread", "side_stream")
INFRA_OK = ("timing_unreliable", "foreign_gpu_process", "device_out_of_memory")


def hog(fill: float, ready: str, n: int) -> None:
    import torch

    free, total = torch.cuda.mem_get_info()
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    c = torch.empty(n, n, device="cuda")
    target = int(total * fill) - (total - free)  # what this process adds to reach ``fill``
    held, chunk = [], 1 << 30
    while sum(t.numel() for t in held) + chunk <= target:
        try:
            held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            break
    torch.cuda.synchronize()
    f2, _ = torch.cuda.mem_get_info()
    t0, iters, last = time.monotonic(), 0, time.monotonic()
    with open(ready + ".tmp", "w") as fh:
        json.dump({"pid": os.getpid(), "total_gib": total / 2**30, "free_before_gib": free / 2**30,
                   "held_gib": sum(t.numel() for t in held) / 2**30, "free_after_gib": f2 / 2**30,
                   "matmul_n": n}, fh)
    os.replace(ready + ".tmp", ready)
    while True:  # busy until killed: one sync per 20 matmuls (a long stream of kernels)
        for _ in range(20):
            torch.mm(a, b, out=c)
        torch.cuda.synchronize()
        iters += 20
        if time.monotonic() - last > 30:
            last = time.monotonic()
            print(f"hog: {iters / (last - t0):.0f} matmuls/s", file=sys.stderr, flush=True)


def top(leave_mib: int, ready: str) -> None:
    import torch

    held = []
    for chunk in (1 << 30, 1 << 28, 1 << 26, 1 << 24):
        while True:
            free, _ = torch.cuda.mem_get_info()
            if free - chunk < leave_mib << 20:
                break
            try:
                held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
            except torch.OutOfMemoryError:
                break
    free, total = torch.cuda.mem_get_info()
    with open(ready + ".tmp", "w") as fh:
        json.dump({"pid": os.getpid(), "held_gib": sum(t.numel() for t in held) / 2**30,
                   "free_after_mib": free / 2**20, "total_gib": total / 2**30}, fh)
    os.replace(ready + ".tmp", ready)
    while True:
        time.sleep(1)


def _row(run: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {**run}
    try:
        with open(run["report"], encoding="utf-8") as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        err = ""
        try:
            with open(run.get("stderr", ""), encoding="utf-8", errors="replace") as f:
                err = f.read()
        except OSError:
            pass
        row.update(ok=None, verdict=f"no report ({type(e).__name__})", codes=[], origins=[],
                   traceback="Traceback" in err, blamed=False, stderr_tail=err[-300:])
        return row
    errors = r.get("errors") or []
    texts = [str(e.get("message", "")) for e in errors] + [str(w) for w in r.get("warnings") or []]
    codes = [str(e.get("code")) for e in errors]
    origins = [str(e.get("origin")) for e in errors]
    acc = r.get("acceptance") or {}
    blamed = any(o == "candidate" for o in origins)
    if r.get("ok") and not errors:
        verdict = "passed" + (f" (accepted={acc.get('accepted')})" if acc else "")
    elif blamed:
        verdict = "REJECTED"
    else:
        verdict = "infrastructure"
    row.update(ok=r.get("ok"), verdict=verdict, codes=codes, origins=origins,
               traceback=any("Traceback (most recent call last)" in t for t in texts),
               blamed=blamed, cheat_code=any(c.removeprefix("current_").startswith(CHEAT_HINTS)
                                             for c in codes),
               median_ms=(r.get("timing") or {}).get("median_ms"),
               warnings_shared=any("another job" in str(w) for w in r.get("warnings") or []),
               message=(errors[0].get("message", "") if errors else "")[:300])
    return row


def table(runs_path: str, out: str) -> int:
    with open(runs_path, encoding="utf-8") as f:
        runs = [json.loads(line) for line in f if line.strip()]
    rows = [_row(r) for r in runs]
    print(f"{'#':>2} {'task':<14} {'mode':<6} {'rc':>3} {'wall_s':>6} {'verdict':<30} "
          f"{'traceback':<9} codes (origin)")
    for i, r in enumerate(rows, 1):
        codes = ", ".join(f"{c} ({o})" for c, o in zip(r["codes"], r["origins"], strict=False)) or "-"
        print(f"{i:>2} {r['task']:<14} {r['mode']:<6} {r.get('rc', ''):>3} "
              f"{r.get('wall_s', 0):>6.1f} {r['verdict']:<30} {r['traceback']!s:<9} {codes}")
    totals = {
        "gradings": len(rows),
        "passed": sum(1 for r in rows if str(r["verdict"]).startswith("passed")),
        "infrastructure": sum(1 for r in rows if r["verdict"] == "infrastructure"),
        "infrastructure_codes": sorted({c for r in rows if r["verdict"] == "infrastructure"
                                        for c in r["codes"]}),
        "rejected_candidate": sum(1 for r in rows if r.get("blamed")),
        "cheat_verdicts": sum(1 for r in rows if r.get("cheat_code")),
        "tracebacks": sum(1 for r in rows if r.get("traceback")),
        "no_report": sum(1 for r in rows if r["ok"] is None),
        "unexpected_infra": sorted({c for r in rows if r["verdict"] == "infrastructure"
                                    for c in r["codes"] if c not in INFRA_OK}),
    }
    print(json.dumps(totals))
    with open(out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        f.write(json.dumps({"totals": totals}) + "\n")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hog")
    h.add_argument("--fill", type=float, default=0.87)
    h.add_argument("--ready", required=True)
    h.add_argument("--n", type=int, default=8192)
    t = sub.add_parser("top")
    t.add_argument("--leave-mib", type=int, default=256)
    t.add_argument("--ready", required=True)
    s = sub.add_parser("table")
    s.add_argument("--runs", required=True)
    s.add_argument("--out", required=True)
    a = p.parse_args()
    if a.cmd == "hog":
        hog(a.fill, a.ready, a.n)
    elif a.cmd == "top":
        top(a.leave_mib, a.ready)
    else:
        return table(a.runs, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
