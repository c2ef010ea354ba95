"""Paired, interleaved timing of the current best against the candidate (judge side).

Both sides get the same fresh inputs in each pair, in alternating order (AB, BA, ...), each
in its own runner with its own buffer, so neither can touch the other's memory. The host
re-derives the decision from the raw pairs; the judge only decides when to stop measuring
and whether an independent replicate is needed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from sandbox import stats
from sandbox.tensors import layout

if TYPE_CHECKING:
    from sandbox.evaluation import Evaluation, Side


def _pairs(ev: Evaluation, cand: Side, cur: Side, n_max: int, looks: list[int] | None,
           acc: dict[str, Any]) -> dict[str, list[float]]:
    dims = ev.task["shapes"]["tune"][0]
    slots = layout(ev.task["tensors"], dims)
    frac = float(ev.task["correctness"].get("timed_check_fraction", 1.0))
    t_cur: list[float] = []
    t_cand: list[float] = []
    seq = stats.SequentialSignTest(delta=float(acc["min_improvement_fraction"]),
                                   alpha=float(acc.get("alpha", 0.01)),
                                   looks=looks) if looks else None
    for i in range(n_max):
        inputs = ev._inputs(slots, ev.rng.getrandbits(62))
        order = [(cand, t_cand), (cur, t_cur)] if i % 2 == 0 else [(cur, t_cur), (cand, t_cand)]
        swap = (i // 2) % 2  # every other pair of pairs, the sides trade buffers
        for side, sink in order:
            check = frac >= 1.0 or ev.rng.random() < frac
            try:
                r = ev.timed(side, slots, check, "accept", inputs=inputs, buf=swap)
            except Exception as e:
                if side is cur and hasattr(e, "error"):
                    e.error["code"] = "current_" + e.error["code"]
                raise
            sink.append(r["ms"])
        if seq is not None:
            if seq.decision() == "continue" and t_cur[-1] > 0 and t_cand[-1] > 0:
                seq.add(t_cur[-1], t_cand[-1])
            if seq.decision() != "continue" and len(t_cur) >= int(acc.get("pairs", 30)):
                break
    return {"t_cur": t_cur, "t_cand": t_cand}


def run_acceptance(ev: Evaluation, cand: Side) -> dict[str, Any]:
    acc = ev.task.get("acceptance", {})
    try:
        cur = ev._open_side(ev.s["current"], "accept")
    except Exception as e:
        if hasattr(e, "error"):
            e.error["code"] = "current_" + e.error["code"]
            e.error["message"] = "the current best failed to load: " + e.error["message"]
        raise
    ev.sides.append(cur)
    cand.map_other(cur, ev.left(ev.run_deadline))
    cur.map_other(cand, ev.left(ev.run_deadline))
    n_seed = max(int(acc.get("pairs", 30)), int(acc.get("min_pairs", 5)))
    controlled = acc.get("rule", "seed") == "controlled"
    looks = sorted(int(x) for x in acc.get("looks", [25, 50, 100, 200]))
    n_max = max(n_seed, looks[-1]) if controlled else n_seed
    for _ in range(int(ev.task.get("benchmark", {}).get("warmup", 10))):
        for side in (cand, cur):  # discarded interleaved pairs: reach a steady power state
            ev.timed(side, layout(ev.task["tensors"], ev.task["shapes"]["tune"][0]), True, "accept")
    out: dict[str, Any] = _pairs(ev, cand, cur, n_max, looks if controlled else None, acc)
    r = [(c - d) / c for c, d in zip(out["t_cur"], out["t_cand"], strict=True) if c > 0]
    med = sorted(r)[len(r) // 2] if r else -math.inf
    if med >= float(acc.get("min_improvement_fraction", 0.01)):
        out["replicate"] = _replicate(ev, cand, cur, n_seed, acc)
    return out


def _replicate(ev: Evaluation, cand: Side, cur: Side, n: int, acc: dict[str, Any]) -> dict[str, Any]:
    """Winner's curse: the reported speed-up comes from new runners, buffers and seeds."""
    for side in (cand, cur):
        side.close()
        ev.sides.remove(side)
    try:
        cand2 = ev._open_side(ev.s["candidate"], "accept")
        ev.sides.append(cand2)
        cur2 = ev._open_side(ev.s["current"], "accept")
        ev.sides.append(cur2)
        cand2.map_other(cur2, ev.left(ev.run_deadline))
        cur2.map_other(cand2, ev.left(ev.run_deadline))
    except Exception as e:  # a replicate that cannot start leaves the speed-up unmeasured
        return {"error": str(e)[:500]}
    rep = _pairs(ev, cand2, cur2, n, None, acc)
    return rep
