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
   2026-12-01).
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
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from injection import calibrate_injection  # noqa: E402

from grader.errors import InfrastructureError  # noqa: E402
from grader.evaluate import EvalRequest, evaluate  # noqa: E402
from grader.judgecall import mode_request, run_judge_mode  # noqa: E402
from grader.limits import Limits  # noqa: E402
from grader.measure.peaks import measure_peak  # noqa: E402
from grader.task import load_task  # noqa: E402
from sandbox.contract.rules import SequentialSignTest, seed_rule  # noqa: E402
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


# A pair of runners' offset allowance the rules apply (us; grader.task.AcceptanceSpec's
# default unless --pair-offset-us says otherwise): the decisions are analysed with it.
PAIR_OFFSET_US = [0.25]


def _sequential(cur: list[float], cand: list[float], delta: float, alpha: float,
                point_margin: bool) -> tuple[bool, int]:
    """(accepted, pairs used) of the sequential sign test on one decision's pairs."""
    t = SequentialSignTest(delta=delta, alpha=alpha, looks=[25, 50, 100], point_margin=point_margin,
                           offset_ms=PAIR_OFFSET_US[0] / 1e3)
    n = 0
    for c, k in zip(cur, cand, strict=True):
        n += 1
        if t.add(c, k) != "continue":
            break
    if t.decision() == "continue":
        t.finish()
    return t.decision() == "accept", n


def analyse(decisions: list[dict[str, list[float]]], delta: float, alpha: float) -> dict[str, Any]:
    ctrl_acc, ctrl_pairs, ctrl_by50, seed_acc, speedups = 0, [], 0, 0, []
    gain_acc, gain_by50 = 0, 0
    for d in decisions:
        cur, cand = d["t_cur"], d["t_cand"]
        acc, n = _sequential(cur, cand, delta, alpha, False)
        ctrl_acc += acc
        ctrl_by50 += acc and n <= 50
        ctrl_pairs.append(n)
        gacc, gn = _sequential(cur, cand, delta, alpha, True)
        gain_acc += gacc
        gain_by50 += gacc and gn <= 50
        seed_acc += seed_rule(cur[:30], cand[:30], min_improvement_fraction=delta,
                              offset_ms=PAIR_OFFSET_US[0] / 1e3).accepted
        if len(cur) >= 100:
            speedups.append(statistics.median(cur[:100]) / statistics.median(cand[:100]))
    k = len(decisions)
    sp = sorted(speedups)
    lo = sp[int(0.025 * (len(sp) - 1))] if sp else None
    hi = sp[math.ceil(0.975 * (len(sp) - 1))] if sp else None
    all_cur = [x for d in decisions for x in d["t_cur"]]
    all_cand = [x for d in decisions for x in d["t_cand"]]
    return {"decisions": k, "controlled_accept_rate": ctrl_acc / k if k else None,
            "controlled_accept_within_50_pairs": ctrl_by50 / k if k else None,
            "mean_pairs_to_decision": statistics.fmean(ctrl_pairs) if ctrl_pairs else None,
            "gain_rule_accept_rate": gain_acc / k if k else None,
            "gain_rule_accept_within_50_pairs": gain_by50 / k if k else None,
            "seed_accept_rate": seed_acc / k if k else None,
            "speedup_at_100_pairs_p2.5": lo, "speedup_at_100_pairs_p97.5": hi,
            "speedup_spread_95_pct": (max(abs(1 - lo), abs(hi - 1)) * 100) if sp else None,
            "true_ratio_cur_over_cand": statistics.median(all_cur) / statistics.median(all_cand)
            if all_cur else None, "median_ms_cur": statistics.median(all_cur) if all_cur else None,
            **empty_call_offsets(decisions)}


def empty_call_offsets(decisions: list[dict[str, Any]]) -> dict[str, Any]:
    """Does an offset between two runners lie in their timing path? Per decision, the
    difference of the sides' medians (us) against the difference of their empty calls' event
    times (us): the correlation, and the spread (sd) of each."""
    rows = [(1e3 * (statistics.median(d["t_cur"]) - statistics.median(d["t_cand"])),
             1e3 * (d["empty_cur"] - d["empty_cand"])) for d in decisions
            if "empty_cur" in d and d["t_cur"] and d["t_cand"]]
    if len(rows) < 3:
        return {}
    xs, ys = [r[0] for r in rows], [r[1] for r in rows]
    sx, sy = statistics.pstdev(xs), statistics.pstdev(ys)
    corr = statistics.correlation(xs, ys) if sx > 0 and sy > 0 else None
    return {"offset_sd_us": sx, "empty_offset_sd_us": sy, "offset_vs_empty_corr": corr}


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
    PAIR_OFFSET_US[0] = a.pair_offset_us
    sizes = {"4us": 1 << 20, "10us": 1 << 22, "100us": 1 << 25, "1ms": 1 << 29}
    if a.quick:
        sizes = {"4us": 1 << 11, "10us": 1 << 12, "100us": 1 << 13, "1ms": 1 << 14}
        a.aa, a.power, a.pairs = min(a.aa, 3), min(a.power, 2), min(a.pairs, 30)
    if a.analyse:
        return reanalyse(a.analyse, a.out)
    parts = set(a.parts.split(","))
    budgets = {k: float(v) for k, v in (x.split("=") for x in a.budget.split(","))}
    res: dict[str, Any] = {"decision_check_fraction": 0.05, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "argv": sys.argv, "device": a.device, "workloads": {}}
    a.out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        a.out.write_text(json.dumps(res, indent=1))

    if "decisions" in parts or "vector_add" in parts:
        peak = measure_peak(backend=a.backend, device=a.device, quick=a.quick)
        res["peaks"], res["environment"] = peak.peaks, peak.environment
        save()
    tmp = Path(tempfile.mkdtemp(prefix="kg-cal-"))
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
            t0 = time.monotonic()
            cal, errors, sandboxes = decide(sc, files, spec, ref, device=a.device, backend=a.backend,
                                            fresh=a.fresh_runners, budget_s=budgets[wname])
            w["decision_wall_s"] = round(time.monotonic() - t0, 1)
            w["sandboxes"], w["fresh_runners"] = sandboxes, a.fresh_runners
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


def reanalyse(files: list[Path], out: Path) -> int:
    """Merge result files (first one first) and recompute every decision summary."""
    res: dict[str, Any] = {}
    for f in files:
        part = json.loads(f.read_text())
        for key, val in part.items():
            if key == "workloads":
                for wn, w in val.items():
                    res.setdefault("workloads", {}).setdefault(wn, {}).update(w)
            elif key not in res or key in ("vector_add", "peaks", "environment"):
                res[key] = val
    for w in res.get("workloads", {}).values():
        for name in ("aa", "gain1", "gain2"):
            if name in w:
                raw = w[name]["raw"]
                w[name] = {**w[name], "delta": 0.01, **analyse(raw, 0.01, 0.01)}
    res["analysed_from"] = [str(f) for f in files]
    out.write_text(json.dumps(res, indent=1))
    print(summary(res))
    return 0


def summary(res: dict[str, Any]) -> str:
    lines = ["workload  N           median_ms  AA ctrl  AA seed  spread95%  power(gain1)@50  power(gain2)@50  pairs(gain2)  cheats"]
    for name, w in res["workloads"].items():
        aa, g1, g2 = w.get("aa", {}), w.get("gain1", {}), w.get("gain2", {})
        ch = w.get("cheats", {})
        caught = f"{sum(c['caught'] for c in ch.values())}/{len(ch)}" if ch else "-"

        def f(v: Any, fmt: str = "{:.3f}") -> str:
            return "-" if v is None else fmt.format(v)
        lines.append(f"{name:9} {w['N']:<11} {f(aa.get('median_ms_cur'), '{:.4f}'):10} "
                     f"{f(aa.get('controlled_accept_rate')):8} {f(aa.get('seed_accept_rate')):8} "
                     f"{f(aa.get('speedup_spread_95_pct'), '{:.2f}'):10} "
                     f"{f(g1.get('controlled_accept_within_50_pairs')):11} "
                     f"{f(g2.get('controlled_accept_within_50_pairs')):11} "
                     f"{f(g2.get('mean_pairs_to_decision'), '{:.1f}'):10} {caught}")
    if "vector_add" in res:
        lines.append(f"vector_add: {json.dumps(res['vector_add'])}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
