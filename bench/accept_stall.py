"""Whose time ran out when one side of an acceptance stalls: the real judge, a real stall.

Runs ``kgrader run TASK GOOD --current GOOD`` (good against itself) with a tight ``--run-s``
and, once the paired calls have begun, stops one side's runner (SIGSTOP from the host) for
``--stop-s`` seconds, ``--after-s`` seconds into the pairs, then lets it go on (SIGCONT).
A stall longer than the judge's wait for that answer is that side's ``timeout`` at once; a
shorter one that leaves the stage past its ``run_s`` is found at the next call
(``sandbox.judge.clock.overrun``), and must name the side whose answers used the time, or
the harness: never the side that happens to call next. One JSON line per run (the stop,
the verdict's code, stage, message and ``overrun_by``), then a summary line.

The pairs have begun when the current best's runner, after waiting idle for ``--quiet-s``
(started ahead, it imports torch, then waits in one read while the candidate is graded),
computes: its CPU time grows by ``--busy-s`` (the CPU device: its calls are CPU work).

    python3 bench/accept_stall.py --side candidate --stop-s 8 --after-s 20 --run-s 40 --runs 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

RUNNER = "sandbox.runner.boot"


def runners(name: str, root: int) -> list[int]:
    """Host pids of live runners under ``root`` (this run's ``kgrader run``, so that runs
    side by side keep apart) whose command line names ``name`` (the side's module)."""
    out = []
    try:
        below = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return []
    for p in below:
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if any(RUNNER in a for a in cmd) and any(a.endswith(name) for a in cmd):
            out.append(p.pid)
    return sorted(out)


def cpu_s(pid: int) -> float:
    """CPU seconds ``pid`` has used (user + system; -1: gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return -1.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def watch(args: argparse.Namespace, proc: subprocess.Popen[bytes], note: dict[str, Any]) -> None:
    """Find the pairs' start, then stall the chosen side's newest runner."""
    t0 = time.monotonic()
    base: dict[int, tuple[float, float, bool]] = {}  # pid -> (cpu s, since, was idle)
    began = False
    while proc.poll() is None and not began:
        now = time.monotonic()
        for pid in runners("current.py", proc.pid):
            c = cpu_s(pid)
            if c < 0:
                continue
            last, since, idle = base.get(pid, (c, now, False))
            if c - last < 0.05:  # flat
                base[pid] = (last, since, idle or now - since >= args.quiet_s)
            elif idle and c - last >= args.busy_s:
                note["pairs_began_s"] = round(now - t0, 2)
                began = True
                break
            elif not idle:
                base[pid] = (c, now, False)
        time.sleep(0.05)
    if proc.poll() is not None:
        note["stalled"] = False
        return
    time.sleep(args.after_s)
    mine = runners(f"{args.side}.py", proc.pid)
    if not mine or proc.poll() is not None:
        note["stalled"] = False
        return
    pid = mine[-1]
    try:
        os.kill(pid, signal.SIGSTOP)
        note.update(stalled=True, stall_at_s=round(time.monotonic() - t0, 2), pid=pid)
        time.sleep(args.stop_s)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def one(args: argparse.Namespace) -> dict[str, Any]:
    task = Path(args.task)
    good = task / "candidates" / "good.py"
    cmd = [sys.executable, "-m", "grader.cli", "run", str(task), str(good), "--current", str(good),
           "--json", "--no-progress", "--run-s", str(args.run_s), "--device", args.device,
           "--backend", args.backend]
    note: dict[str, Any] = {"side": args.side, "after_s": args.after_s, "stop_s": args.stop_s,
                            "run_s": args.run_s, "task": task.name, "load1": os.getloadavg()[0]}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    w = threading.Thread(target=watch, args=(args, proc, note), daemon=True)
    w.start()
    out, err = proc.communicate()
    w.join(timeout=args.stop_s + 5)
    note.update(rc=proc.returncode, wall_s=round(time.monotonic() - t0, 1))
    try:
        rep = json.loads(out)
    except ValueError:
        note.update(code="no_report", message=err.decode(errors="replace")[-600:])
        return note
    errs = rep.get("errors") or []
    e = errs[0] if errs else {}
    acc = rep.get("acceptance") or {}
    note.update(code=e.get("code"), stage=e.get("stage"), origin=e.get("origin"),
                message=(e.get("message") or "")[:300],
                overrun_by=(e.get("detail") or {}).get("overrun_by"),
                accepted=acc.get("accepted"), warnings=[w for w in rep.get("warnings") or []
                                                       if "accept" in w][:3],
                detail={k: v for k, v in (e.get("detail") or {}).items()
                        if k.endswith("_s") or k == "overrun_by"})
    return note


def blamed_other(side: str, code: str | None) -> bool:
    """Whether ``code`` blames the side that was not stopped for a time limit."""
    if code is None or not code.removeprefix("current_").endswith("timeout") \
            or code.startswith("harness"):
        return False
    return code.startswith("current_") != (side == "current")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--task", default="examples/softmax")
    ap.add_argument("--side", choices=("candidate", "current"), default="candidate")
    ap.add_argument("--after-s", type=float, default=20.0, help="into the pairs, before the stop")
    ap.add_argument("--stop-s", type=float, default=8.0, help="how long the side is stopped")
    ap.add_argument("--run-s", type=float, default=40.0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--busy-s", type=float, default=0.3,
                    help="CPU seconds of the current best's runner that start the pairs")
    ap.add_argument("--quiet-s", type=float, default=3.0,
                    help="how long the current best's runner waits idle before the pairs")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--backend", default="bwrap")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = []
    for i in range(args.runs):
        row = {"i": i, **one(args)}
        rows.append(row)
        line = json.dumps(row)
        print(line, flush=True)
        if args.out:
            with args.out.open("a") as f:
                f.write(line + "\n")
    wrong = [r for r in rows if r.get("accepted") or blamed_other(args.side, r.get("code"))]
    summary = {"summary": True, "runs": len(rows), "stalled": sum(bool(r.get("stalled")) for r in rows),
               "codes": sorted({str(r.get("code")) for r in rows}), "wrong": len(wrong)}
    print(json.dumps(summary), flush=True)
    if args.out:
        with args.out.open("a") as f:
            f.write(json.dumps(summary) + "\n")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
