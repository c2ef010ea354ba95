"""Calibration mode of the judge: many acceptance decisions in one sandbox.

For each scenario (a current and a candidate source), the judge opens one runner per side
and measures ``decisions`` independent runs of ``pairs`` interleaved pairs each, exactly as
the acceptance stage does (fresh inputs per pair, alternating order, judge-chosen checks).
The host turns the raw pairs into false-accept rates, power and spreads
(``bench/calibration.py``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sandbox.acceptance import _pairs
from sandbox.tensors import layout

if TYPE_CHECKING:
    from sandbox.evaluation import Evaluation


def _round(xs: list[float]) -> list[float]:
    return [float(f"{x:.6g}") for x in xs]


def run_calibration(ev: Evaluation) -> dict[str, Any]:
    acc = ev.task.get("acceptance", {})
    slots = layout(ev.task["tensors"], ev.task["shapes"]["tune"][0])
    out: dict[str, Any] = ev.result.setdefault("calibration", {})  # partial results survive
    for sc in ev.s["scenarios"]:
        t0 = time.monotonic()
        ev.compile_deadline = t0 + float(ev.s["limits"]["compile_s"])
        cur = ev._open_side(sc["current"], "compile")
        ev.sides.append(cur)
        cand = ev._open_side(sc["candidate"], "compile")
        ev.sides.append(cand)
        cand.map_other(cur, ev.left(ev.run_deadline))
        cur.map_other(cand, ev.left(ev.run_deadline))
        for _ in range(int(ev.task.get("benchmark", {}).get("warmup", 10))):
            for side in (cand, cur):
                ev.timed(side, slots, True, "accept")
        decisions = []
        for _ in range(int(sc["decisions"])):
            if ev.left(ev.run_deadline) < float(sc.get("reserve_s", 30)) or \
                    time.monotonic() - t0 > float(sc.get("budget_s", 1e9)):
                break
            d = _pairs(ev, cand, cur, int(sc["pairs"]), None, acc)
            decisions.append({"t_cur": _round(d["t_cur"]), "t_cand": _round(d["t_cand"])})
        out[sc["name"]] = {"decisions": decisions, "seconds": round(time.monotonic() - t0, 2)}
        for side in (cand, cur):
            side.close()
            ev.sides.remove(side)
    return out
