#!/usr/bin/env python3
"""How good are kgrader's numbers? A/A false accepts, power, spread, cheats, overhead.

Writes one JSON file (raw decisions included) and prints a summary table. Everything
runs through the real sandbox (bwrap) and the real judge/runner protocol:

1. A/A: the same source as current and candidate (separately loaded runners and buffers),
   ``--aa`` decisions of ``--pairs`` pairs per workload; the false-accept rate of each rule
   and the 95% spread of the measured speed-up at 100 pairs. Each decision gets a new pair
   of runners, as each acceptance does, so that an offset that belongs to one pair of
   runners counts in the spread instead of shifting every decision alike
   (``--shared-runners``: one pair for all of a scenario's decisions, as before call F of
   2026-12-01). ``--prepare-ahead K``: one decision per sandbox instead, K sandboxes
   prepared at the device's measurement gate while one measures; the JSON then holds each
   turn's ``[grant, end]`` interval, and the run fails (exit 3) if any two overlap
   (``calibration_ahead.py``, ``calibration_analysis.check_gate``).
2. Injected slowdowns of 1% and 2% (the current's programs spin a number of
   multiply-adds, or extra programs move scratch bytes, the setting found by a measured
   sweep on the device, ``calibrate_injection``): the true effect measured again from the
   pairs themselves,
   detection power within 50 pairs for the controlled and the ``gain`` rule, mean pairs to
   a decision.
3. Timing cheats (side stream, background thread, batch-and-skip, lazy output), each
   graded by the full pipeline with the static scan off: caught means "did not pass".
4. Overhead: grader wall time per evaluation against the kernel time it measured.
Plus ``examples/vector_add`` graded on the device, against the calibrated copy bandwidth.

Usage (GPU host):  python3 bench/calibration.py --device cuda --out bench/results/calibration.json
Quick CPU check:   python3 bench/calibration.py --device cpu --quick --out /tmp/cal.json
A/A only, fast:    python3 bench/calibration.py --parts decisions --scenarios aa --workloads 4us \
                       --aa 300 --budget 4us=450 --prepare-ahead 2 --out bench/results/aa.json
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibration_ahead import AheadRun, Result  # noqa: E402
from calibration_analysis import PAIR_OFFSET_US, GateOverlap, analyse, check_run, reanalyse, summary  # noqa: E402
from injection import calibrate_injection  # noqa: E402

from grader.backends.gate import MeasureGate  # noqa: E402
from grader.backends.select import select_backend  # noqa: E402
from grader.errors import InfrastructureError  # noqa: E402
from grader.evaluate import EvalRequest, evaluate  # noqa: E402
from grader.judgecall import mode_request, resolve_device, run_judge_mode  # noqa: E402
from grader.limits import Limits  # noqa: E402
from grader.measure.peaks import measure_peak  # noqa: E402
from grader.task import load_task  # noqa: E402
from sandbox.contract.wire import CalibrateWire  # noqa: E402

KERNEL = '''import torch
import triton
import triton.language as tl

SPIN_COUNT = {spin}
EXTRA_PROGRAMS = {extra}


@triton.jit
def _scale(x_ptr, y_ptr, s_ptr, n, spin, n_main, BLOCK: tl.constexpr, SPIN: tl.constexpr):
    pid = tl.program_id(0)
    if pid < n_main:
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        v = tl.load(x_ptr + offs, mask=m) * 2.0
        # Injected slowdown, kind 1: every program runs ``spin`` dependent multiply-adds
        # between its load and its store (compiled out on the honest side: SPIN is a
        # constexpr). On an H200 it costs nothing measurable at ~10 us up to ~250, then
        # rises steeply; at ~100 us it grows gradually (0.8% at 192).
        if SPIN:
            a = pid.to(tl.float32)
            for _ in range(spin):
                a = a * 0.999 + 1.0
            v = tl.where(a == -1.0, v + 1.0, v)  # never true; keeps the chain alive
        tl.store(y_ptr + offs, v, mask=m)
    else:
        # Kind 2: extra programs past ``n_main`` move a block of scratch each, as many
        # bytes as a real program: a fraction more traffic where the grid has many waves.
        offs = (pid - n_main) * BLOCK + tl.arange(0, BLOCK)
        tl.store(s_ptr + offs, tl.load(s_ptr + offs) + 1.0)


_scratch = {{}}


def _run(x, y):
    n = x.numel()
    n_main = triton.cdiv(n, 4096)
    s = _scratch.get(x.device)
    if s is None:
        s = _scratch[x.device] = torch.zeros(max(EXTRA_PROGRAMS, 1) * 4096, device=x.device)
    _scale[(n_main + EXTRA_PROGRAMS,)](x, y, s, n, SPIN_COUNT, n_main, BLOCK=4096,
                                       SPIN=SPIN_COUNT > 0)


_calls = [0]
'''
LAUNCH = {
    "honest": "def launch(x, y):\n    _run(x, y)\n",
    "side_stream": ("import threading\n\n\ndef launch(x, y):\n    if torch.cuda.is_available():\n        s = torch.cuda.Stream()\n"
                    "        with torch.cuda.stream(s):\n            _run(x, y)\n    else:\n"
                    "        threading.Thread(target=_run, args=(x, y)).start()\n"),
    "background_thread": "import threading\n\n\ndef launch(x, y):\n    threading.Thread(target=_run, args=(x, y)).start()\n",
    "batch_and_skip": ("def launch(x, y):\n    _calls[0] += 1\n"
                       "    if _calls[0] <= 12 or _calls[0] % 2 == 0:\n        _run(x, y)\n"),
    "lazy_output": ("class _Lazy:\n    def __init__(self, *a):\n        self.a = a\n\n"
                    "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
                    "        _run(*self.a)\n        return NotImplemented\n\n\n"
                    "def launch(x, y):\n    return _Lazy(x, y)\n"),
}
REFERENCE = "def launch(x, y):\n    y.copy_(x * 2.0)\n"


def source(kind: str, knob: tuple[str, int] = ("spin", 0)) -> str:
    """A candidate's source; ``knob``: the injected slowdown, ("spin", count) or
    ("extra", programs)."""
    spin, extra = (knob[1], 0) if knob[0] == "spin" else (0, knob[1])
    return KERNEL.format(spin=int(spin), extra=int(extra)) + "\n\n" + LAUNCH[kind]


def make_task(root: Path, name: str, n: int, bench: dict[str, Any], check: float = 1.0) -> Path:
    d = root / name
    d.mkdir(parents=True)
    spec = {"name": name, "tensors": [
        {"name": "x", "role": "input", "dtype": "float32", "shape": ["N"]},
        {"name": "y", "role": "output", "dtype": "float32", "shape": ["N"]}],
        "shapes": {"tune": [{"N": n}], "hidden": []},
        "correctness": {"seeds": [1], "atol": 1e-6, "rtol": 1e-6, "timed_check_fraction": check},
        "benchmark": bench, "cost_model": {"bytes": "8*N", "flops": "N"},
        "acceptance": {"rule": "controlled", "pairs": 30, "looks": [25, 50, 100]},
        "limits": {"compile_s": 120, "run_s": 560, "memory_mib": 16384}, "policy": "default"}
    (d / "task.json").write_text(json.dumps(spec, indent=1))
    (d / "reference.py").write_text(REFERENCE)
    return d


def decide(sc: list[dict[str, Any]], files: dict[str, str], spec: Any, ref: str, *,
           device: str, backend: str, fresh: bool,
           budget_s: float) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """The scenarios' decisions (each scenario names its ``decisions``, ``pairs`` and
    ``budget_s``) in calibrate-mode sandboxes: one, or with ``fresh`` runner pairs as many
    as they need (a sandbox has 32 runner uids: 16 fresh pairs), each going on with what is
    still wanted within what is left of each scenario's budget."""
    cal: dict[str, Any] = {s["name"]: {"decisions": [], "seconds": 0.0} for s in sc}
    errors: list[Any] = []
    sandboxes, t0 = 0, time.monotonic()
    while True:
        todo = []
        for s in sc:
            got = cal[s["name"]]
            left = s["budget_s"] - got["seconds"]
            if len(got["decisions"]) < s["decisions"] and left > 5:
                todo.append({**s, "decisions": s["decisions"] - len(got["decisions"]), "budget_s": left})
        run_s = budget_s - (time.monotonic() - t0)
        if not todo or run_s < 35 or errors or (sandboxes and not fresh):
            return cal, errors, sandboxes
        todo = [{**s, "fresh_runners": fresh} for s in todo]
        req = mode_request("calibrate", device, task=spec.to_wire(), reference=ref,
                           candidate="/kg/in/a.py",
                           calibrate=CalibrateWire(scenarios=tuple(todo),
                                                   decisions=max(s["decisions"] for s in todo),
                                                   pairs=todo[0]["pairs"]))
        sandboxes += 1
        try:
            p = run_judge_mode(req, files, backend=backend,
                               limits=Limits(compile_s=120, run_s=run_s, memory_mib=65536))
        except InfrastructureError as e:  # keep the earlier sandboxes' decisions
            errors.append({"code": "infrastructure", "message": str(e)[:2000]})
            return cal, errors, sandboxes
        errors += [dataclasses.asdict(e) for e in p.errors]
        new = 0
        for name, got in (p.calibration or {}).items():
            cal[name]["decisions"] += got.get("decisions", [])
            cal[name]["seconds"] = round(cal[name]["seconds"] + float(got.get("seconds", 0.0)), 2)
            new += len(got.get("decisions", []))
        if not new:
            return cal, errors, sandboxes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--backend", default="bwrap")
    ap.add_argument("--quick", action="store_true", help="tiny sizes and counts (CPU check)")
    ap.add_argument("--aa", type=int, default=100, help="A/A decisions per workload")
    ap.add_argument("--power", type=int, default=40, help="decisions per injected slowdown")
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--calls-per-pair", type=int, default=1,
                    help="timed calls per side in each pair, their median the pair's time")
    ap.add_argument("--fresh-runners", dest="fresh_runners", action="store_true", default=True,
                    help="a new pair of runners for every decision, as in acceptance, in as many "
                         "sandboxes as that needs (the default)")
    ap.add_argument("--shared-runners", dest="fresh_runners", action="store_false",
                    help="one pair of runners serves all of a scenario's decisions (faster; "
                         "leaves a pair's own offset out of the spread: runs before 2026-12-01 "
                         "call F)")
    ap.add_argument("--prepare-ahead", type=int, default=None, metavar="K",
                    help="one decision per calibrate-mode sandbox, K sandboxes prepared (judge "
                         "started, torch imported) at the device's measurement gate while one "
                         "measures; 0: the same, one at a time (bench/calibration_ahead.py). "
                         "bwrap only gains from it: docker starts a container after its grant")
    ap.add_argument("--decisions-per-sandbox", type=int, default=1, metavar="D",
                    help="with --prepare-ahead: D decisions per sandbox, each with a fresh "
                         "runner pair whose torch imports start with the sandbox (at most 15: "
                         "a sandbox's runner uids); a decision then skips a sandbox's start")
    ap.add_argument("--parts", default="decisions,cheats,overhead,vector_add")
    ap.add_argument("--workloads", default="4us,10us,100us,1ms")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--analyse", type=Path, nargs="+",
                    help="re-derive the summaries from saved raw decisions and cheat/overhead "
                         "files (merged into --out) instead of measuring")
    ap.add_argument("--scenarios", default="aa,gain1,gain2",
                    help="decision scenarios to run (A/A; 1%% and 2%% injected slowdowns)")
    ap.add_argument("--budget", default="4us=70,10us=70,100us=90,1ms=200",
                    help="seconds of measuring per workload (the judge stops deciding when out)")
    ap.add_argument("--pair-offset-us", type=float, default=PAIR_OFFSET_US[0],
                    help="the rules' allowance for a runner pair's own offset (the task default)")
    a = ap.parse_args()
    if a.prepare_ahead is not None and a.prepare_ahead < 0:
        ap.error("--prepare-ahead must be 0 or more")
    if not 1 <= a.decisions_per_sandbox <= 15 or (a.decisions_per_sandbox > 1 and a.prepare_ahead is None):
        ap.error("--decisions-per-sandbox must be 1-15, and more than 1 only with --prepare-ahead")
    PAIR_OFFSET_US[0] = a.pair_offset_us
    sizes = {"4us": 1 << 20, "10us": 1 << 22, "100us": 1 << 25, "1ms": 1 << 29}
    if a.quick:
        sizes = {"4us": 1 << 11, "10us": 1 << 12, "100us": 1 << 13, "1ms": 1 << 14}
        a.aa, a.power, a.pairs = min(a.aa, 3), min(a.power, 2), min(a.pairs, 30)
    if a.analyse:
        try:
            return reanalyse(a.analyse, a.out)
        except GateOverlap as ov:
            print(f"calibration: gate intervals overlap: {ov}", file=sys.stderr)
            return 3
    parts = set(a.parts.split(","))
    budgets = {k: float(v) for k, v in (x.split("=") for x in a.budget.split(","))}
    res: dict[str, Any] = {"decision_check_fraction": 0.05, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "argv": sys.argv, "device": a.device, "workloads": {}}
    a.out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        a.out.write_text(json.dumps(res, indent=1))

    # --prepare-ahead: one gate for the device and one clock origin for the whole run.
    gate, origin = MeasureGate("calibration"), time.monotonic()
    be = select_backend(a.backend, resolve_device(a.device)) if a.prepare_ahead is not None else None
    if a.prepare_ahead is not None:
        res["gate_origin"] = "gate intervals: monotonic seconds from the run's start"
    if "decisions" in parts or "vector_add" in parts:
        peak = measure_peak(backend=a.backend, device=a.device, quick=a.quick)
        res["peaks"], res["environment"] = peak.peaks, peak.environment
        save()
    tmp = Path(tempfile.mkdtemp(prefix="kg-cal-"))
    atexit.register(shutil.rmtree, tmp, True)  # the bench's own task folders, not its results
    for wname in a.workloads.split(","):
        n = sizes[wname]
        w: dict[str, Any] = res["workloads"].setdefault(wname, {"N": n})
        task = make_task(tmp, f"cal_{wname}", n, {"warmup": 10, "samples": 25, "reps": 5, "cache": "cold"})
        # Decisions check a judge-chosen 5% of timed calls (announced in the JSON); the
        # cheat and overhead runs use the full protocol (every timed call checked).
        dtask = make_task(tmp, f"dec_{wname}", n, {"warmup": 10, "samples": 25, "reps": 5, "cache": "cold"},
                          check=0.05)
        spec, ref = load_task(dtask)
        if "decisions" in parts:
            chosen = a.scenarios.split(",")
            knobs: dict[str, tuple[str, int]] = {"gain1": ("spin", 4), "gain2": ("extra", 1)}  # CPU check
            if a.device == "cuda" and {"gain1", "gain2"} & set(chosen):
                inj = w["injection"] = calibrate_injection(KERNEL, n, (0.01, 0.02))
                save()
                for name, t in (("gain1", "0.010"), ("gain2", "0.020")):
                    pick = inj["chosen"][t]
                    if pick:
                        knobs[name] = (pick[0], int(pick[1]))
                    elif name in chosen:  # the sweep never reached the target
                        chosen.remove(name)
                        w[name] = {"skipped": "no setting in the sweep reached this slowdown"}
            w["knobs"] = {k: list(v) for k, v in knobs.items()}
            files = {"a.py": source("honest"), "a2.py": source("honest"),
                     "b1.py": source("honest", knobs["gain1"]), "b2.py": source("honest", knobs["gain2"])}
            sc = [s for s in (
                {"name": "aa", "current": "/kg/in/a.py", "candidate": "/kg/in/a2.py", "decisions": a.aa},
                {"name": "gain1", "current": "/kg/in/b1.py", "candidate": "/kg/in/a.py", "decisions": a.power},
                {"name": "gain2", "current": "/kg/in/b2.py", "candidate": "/kg/in/a.py", "decisions": a.power})
                if s["name"] in chosen]
            weights = {"aa": 2.0, "gain1": 1.0, "gain2": 1.0}  # A/A gets half when all run
            total = sum(weights[s["name"]] for s in sc)
            for s in sc:
                s["pairs"] = a.pairs
                s["calls_per_pair"] = a.calls_per_pair
                s["budget_s"] = budgets[wname] * weights[s["name"]] / total
                s["weight"] = weights[s["name"]]
            t0 = time.monotonic()
            if a.prepare_ahead is None:
                cal, errors, sandboxes = decide(sc, files, spec, ref, device=a.device, backend=a.backend,
                                                fresh=a.fresh_runners, budget_s=budgets[wname])
            else:
                def progress(r: Result, w: dict[str, Any] = w) -> None:  # a killed run keeps its decisions
                    for name, got in r.cal.items():
                        w[name] = {"partial": True, "raw": got["decisions"]}
                    w["gate_intervals"], w["errors"] = r.intervals, r.errors
                    save()

                assert be is not None
                ahead = AheadRun(sc, files, spec, ref, device=a.device, backend=be, ahead=a.prepare_ahead,
                                 budget_s=budgets[wname], gate=gate, origin=origin,
                                 per_sandbox=a.decisions_per_sandbox, progress=progress).run()
                cal, errors, sandboxes = ahead.cal, ahead.errors, ahead.sandboxes
                w["gate_intervals"], w["refused_sandboxes"] = ahead.intervals, ahead.refused
            w["decision_wall_s"] = round(time.monotonic() - t0, 1)
            w["sandboxes"], w["prepare_ahead"] = sandboxes, a.prepare_ahead
            w["decisions_per_sandbox"] = a.decisions_per_sandbox
            w["fresh_runners"] = a.fresh_runners or a.prepare_ahead is not None
            w.pop("errors", None)
            if errors:
                w["errors"] = errors
            # Every rule decides at the task's margin (min_improvement_fraction = 0.01); the
            # scenarios differ in the true effect only.
            for name, delta in (("aa", 0.01), ("gain1", 0.01), ("gain2", 0.01)):
                if name not in chosen:
                    continue
                decs = cal.get(name, {}).get("decisions", [])
                w[name] = {"delta": delta, **analyse(decs, delta, 0.01), "raw": decs,
                           "seconds": cal.get(name, {}).get("seconds")}
            try:
                if n_iv := check_run(res):
                    res["gate_check"] = f"{n_iv} gate intervals, none overlaps"
            except GateOverlap as ov:  # the decisions are not independent: say so, loudly
                res["gate_check"] = f"FAILED: {ov}"
                save()
                print(f"calibration: gate intervals overlap: {ov}", file=sys.stderr)
                return 3
            save()
        if "cheats" in parts:
            w["cheats"] = {}
            quick = make_task(tmp, f"cheat_{wname}", n, {"warmup": 5, "samples": 10, "reps": 2, "cache": "cold"})
            for cheat in ("side_stream", "background_thread", "batch_and_skip", "lazy_output"):
                f = tmp / f"{wname}_{cheat}.py"
                f.write_text(source(cheat))
                r = evaluate(EvalRequest.from_paths(task_dir=quick, candidate=f, backend=a.backend, device=a.device,
                                         policy=str(ROOT / "tests/policies/runtime-only.toml")))
                e = r.errors[0] if r.errors else None
                w["cheats"][cheat] = {"caught": not r.ok, "stage": e.stage if e else None,
                                      "code": e.code if e else None,
                                      "message": e.message[:300] if e else None}
                save()
        if "overhead" in parts:
            f = tmp / f"{wname}_honest.py"
            f.write_text(source("honest"))
            t0 = time.monotonic()
            r = evaluate(EvalRequest.from_paths(task_dir=task, candidate=f, backend=a.backend, device=a.device,
                                     policy="default"))
            wall = time.monotonic() - t0
            tm = r.timing
            w["overhead"] = {"ok": r.ok, "errors": [e.code for e in r.errors], "wall_s": round(wall, 2),
                             "samples": tm.samples if tm else None,
                             "median_ms": tm.median_ms if tm else None,
                             "kernel_time_s": (tm.mean_ms * tm.samples / 1e3) if tm else None,
                             "wall_per_timed_call_ms": (wall * 1e3 / tm.samples) if tm else None}
            save()
    if "vector_add" in parts:
        r = evaluate(EvalRequest.from_paths(task_dir=ROOT / "examples/vector_add",
                                 candidate=ROOT / "examples/vector_add/candidates/good.py",
                                 backend=a.backend, device=a.device))
        bw = r.timing.bandwidth_gbps if r.timing else None
        copy = (res.get("peaks") or {}).get("bandwidth_gbps")
        res["vector_add"] = {"ok": r.ok, "errors": [e.code for e in r.errors],
                             "median_ms": r.timing.median_ms if r.timing else None,
                             "bandwidth_gbps": bw, "copy_bandwidth_gbps": copy,
                             "fraction_of_copy": (bw / copy) if bw and copy else None,
                             "wall_s": r.sandbox.wall_s if r.sandbox else None}
    res["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    save()
    print(summary(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
