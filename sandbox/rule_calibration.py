"""Calibration mode of the judge: many acceptance decisions in one sandbox.

For each scenario (a current and a candidate source), the judge opens one runner per side
and measures ``decisions`` independent runs of ``pairs`` interleaved pairs each, exactly as
the acceptance stage does (fresh inputs per pair, alternating order, judge-chosen checks,
the escape check on both sides). The host turns the raw pairs into false-accept rates,
power and spreads (``bench/calibration.py``).
"""

from __future__ import annotations

import time
from typing import Any

from sandbox.acceptance import measure_pairs
from sandbox.benchmark import warm_up
from sandbox.evaluation import Evaluation
from sandbox.sides import paired_buffers


def _round(xs: tuple[float, ...]) -> list[float]:
    return [float(f"{x:.6g}") for x in xs]


def run_calibration(ev: Evaluation) -> None:
    assert ev.req.calibrate is not None
    ev.stage = "accept"
    ev.calibration = out = {}  # partial results survive a failure later on
    for sc in ev.req.calibrate.scenarios:
        t0 = time.monotonic()
        ev.compile_deadline = t0 + ev.req.limits.compile_s
        bufs = paired_buffers(ev.nbytes) if ev.dev == "cuda" else ((), ())
        cand, cur = ev.open_sides([(sc["candidate"], bufs[0]), (sc["current"], bufs[1])], "compile")
        warm_up(ev, [cand, cur], ev.slots(), "accept")
        decisions: list[dict[str, Any]] = []
        for _ in range(int(sc.get("decisions", ev.req.calibrate.decisions))):
            if ev.left(ev.run_deadline) < float(sc.get("reserve_s", 30)) or \
                    time.monotonic() - t0 > float(sc.get("budget_s", 1e9)):
                break
            d = measure_pairs(ev, cand, cur, int(sc.get("pairs", ev.req.calibrate.pairs)), False,
                              calls_per_pair=int(sc.get("calls_per_pair", 1)))
            decisions.append({"t_cur": _round(d.t_cur), "t_cand": _round(d.t_cand)})
        out[sc["name"]] = {"decisions": decisions, "seconds": round(time.monotonic() - t0, 2)}
        for side in (cand, cur):
            ev.close_side(side)
