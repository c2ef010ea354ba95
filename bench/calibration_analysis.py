"""The analysis of ``bench/calibration.py``'s results: rules on raw pairs, summaries, and the
proof that no two measurements overlapped.

Pure logic on the JSON the script writes (no sandbox, no torch): :func:`analyse` turns one
scenario's raw decisions into false-accept rates, power and spreads; :func:`check_gate`
proves, from the gate intervals of a run with ``--prepare-ahead``, that the device was held
by one sandbox at a time; :func:`reanalyse` re-derives every summary from saved files.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sandbox.contract.rules import SequentialSignTest, seed_rule

# A pair of runners' offset allowance the rules apply (us; grader.task.AcceptanceSpec's
# default unless --pair-offset-us says otherwise): the decisions are analysed with it.
PAIR_OFFSET_US = [0.25]


class GateOverlap(RuntimeError):
    """Two sandboxes' turns at the device overlapped, or a turn's interval is incomplete:
    the run's decisions cannot be shown to be independent of each other."""


def check_gate(intervals: Iterable[Mapping[str, Any]]) -> int:
    """Raise :class:`GateOverlap` unless every ``{"grant": t, "end": t}`` interval (monotonic
    seconds on one host clock: from the grant byte to the moment the gate was given back,
    after the sandbox was dead) is complete and none overlaps another. Touching is allowed
    (one ends where the next begins). Returns how many intervals were checked."""
    rows = []
    for i, iv in enumerate(intervals):
        grant, end = iv.get("grant"), iv.get("end")
        if not isinstance(grant, int | float) or not isinstance(end, int | float):
            raise GateOverlap(f"gate interval {i} is incomplete: {dict(iv)}")
        if end < grant:
            raise GateOverlap(f"gate interval {i} ends before its grant: {dict(iv)}")
        rows.append((float(grant), float(end), i, iv))
    rows.sort(key=lambda r: (r[0], r[1]))
    held_until, holder = -math.inf, None
    for grant, end, i, iv in rows:
        if grant < held_until:
            raise GateOverlap(f"gate interval {i} {dict(iv)} was granted at {grant:.6f} s while "
                              f"interval {holder} still held the device until {held_until:.6f} s")
        held_until, holder = end, i
    return len(rows)


def check_run(res: Mapping[str, Any]) -> int:
    """:func:`check_gate` over every workload of one run (they share the run's gate and
    clock origin); 0 when the run used no gate."""
    return check_gate(iv for w in res.get("workloads", {}).values()
                      for iv in w.get("gate_intervals", ()))


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


def analyse(decisions: list[dict[str, Any]], delta: float, alpha: float) -> dict[str, Any]:
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
            "speedup_spread_95_pct": (max(abs(1 - lo), abs(hi - 1)) * 100)
            if lo is not None and hi is not None else None,
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


def reanalyse(files: list[Path], out: Path) -> int:
    """Merge result files (first one first) and recompute every decision summary. Each
    file's gate intervals are checked on their own (each run has its own clock origin):
    an overlap raises :class:`GateOverlap`."""
    res: dict[str, Any] = {}
    checked = 0
    for f in files:
        part = json.loads(f.read_text())
        checked += check_run(part)
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
    if checked:
        res["gate_check"] = f"{checked} gate intervals, none overlaps"
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
        n = sum(w.get(s, {}).get("decisions") or 0 for s in ("aa", "gain1", "gain2"))
        if "decision_wall_s" in w and n:
            lines.append(f"  {name}: {n} decisions in {w['decision_wall_s']} s "
                         f"({w['decision_wall_s'] / n:.2f} s each), {w.get('sandboxes')} "
                         f"sandboxes, prepare_ahead={w.get('prepare_ahead')}, "
                         f"errors={len(w.get('errors', ()))}")
    if "gate_check" in res:
        lines.append(f"gate: {res['gate_check']}")
    if "vector_add" in res:
        lines.append(f"vector_add: {json.dumps(res['vector_add'])}")
    return "\n".join(lines)
