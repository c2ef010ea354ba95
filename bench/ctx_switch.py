"""Does the judge's own device work before a call lengthen the call's round trip? (CUDA)

The escape check (sandbox/judge/escape.py) compares the judge's round trip less the timed
region of real calls against that of empty calls. Before every real call the judge writes
the fresh inputs, poisons the outputs and arms the guard bands in its own CUDA context (and,
in the accept stage, runs its idle probe); before an empty call it does nothing on the
device. If the GPU's switch from the judge's context back to the runner's costs time that
the runner's flush or lead absorbs only partly, real calls carry a systematic offset that
no candidate caused: 0.09-0.13 ms on an H200 (docs/benchmarks-archive.md) and, in the
accept stage on one H100 host, 0.20-0.22 ms against the 0.2 ms floor (timing_unreliable in
4 of 10 honest acceptances, 2026-12-06).

This script measures that offset alone, without kgrader: a parent process (the judge) and
a child (the runner), each with its own context, a pipe between them; the child times
calls the way sandbox/runner/timing.py does (synchronize, flush, sleep-kernel lead, start
event, body, end event, synchronize). Each round, in shuffled order:

* ``empty``: an empty body, the judge idle on the device before it;
* ``empty_after_probe``: the judge runs a one-element add and synchronizes first;
* ``empty_after_write``: the judge writes ``--write-mib`` of fresh data and synchronizes;
* ``add_after_write``: a real body (an elementwise add of the child's own tensors,
  ``--elements`` each), after the judge's write: what kgrader's real calls do.

Per variant: the median of (judge round trip - event time), ms. Usage on a GPU host:
    python bench/ctx_switch.py --rounds 400 --json OUT/ctx_switch.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import statistics
import time
from pathlib import Path
from typing import Any

VARIANTS = ("empty", "empty_after_probe", "empty_after_write", "add_after_write")
LEAD_US = 100.0


def runner(conn: Any, elements: int) -> None:
    import torch

    torch.cuda.init()
    x = torch.rand(elements, device="cuda")
    y = torch.rand(elements, device="cuda")
    out = torch.empty_like(x)
    flush = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    khz = int(getattr(torch.cuda.get_device_properties(0), "clock_rate", 0) or 2_000_000)
    lead = int(LEAD_US * khz / 1e3)
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg == "exit":
            return
        torch.cuda.synchronize()
        flush.fill_(0x5A)
        torch.cuda._sleep(lead)
        start.record()
        if msg == "add":
            torch.add(x, y, out=out)
        end.record()
        torch.cuda.synchronize()
        conn.send(start.elapsed_time(end))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--elements", type=int, default=1 << 24)
    ap.add_argument("--write-mib", type=int, default=64)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("ctx_switch.py measures a CUDA device; this host has none")
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    child = ctx.Process(target=runner, args=(theirs, args.elements))
    child.start()
    theirs.close()  # the child's end: a child that dies is an EOFError here, not a hang
    if mine.recv() != "ready":
        raise SystemExit("the runner process did not start")
    probe = torch.zeros(1, device="cuda")
    src = torch.rand((args.write_mib << 20) // 4, device="cuda")
    dst = torch.empty_like(src)
    torch.cuda.synchronize()
    over: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(args.rounds + 20):
        order = list(VARIANTS)
        random.shuffle(order)
        for v in order:
            if v == "empty_after_probe":
                probe.add_(1.0)
                torch.cuda.synchronize()
            elif v in ("empty_after_write", "add_after_write"):
                dst.copy_(src)
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            mine.send("add" if v == "add_after_write" else "empty")
            ms = mine.recv()
            judge_ms = (time.perf_counter() - t0) * 1e3
            if r >= 20:  # the first rounds warm both processes up
                over[v].append(judge_ms - ms)
    mine.send("exit")
    child.join(30)
    base = statistics.median(over["empty"])
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "rounds": args.rounds,
                              "elements": args.elements, "write_mib": args.write_mib,
                              "median_overhead_ms": {}, "offset_vs_empty_ms": {}}
    for v in VARIANTS:
        med = statistics.median(over[v])
        result["median_overhead_ms"][v] = round(med, 4)
        result["offset_vs_empty_ms"][v] = round(med - base, 4)
        print(f"{v:20s} judge - events: median {med:.4f} ms, {med - base:+.4f} ms vs empty")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**result, "raw_ms": over}, indent=1))


if __name__ == "__main__":
    main()
