"""Calibration mode of the judge: many acceptance decisions in one sandbox.

For each scenario (a current and a candidate source), the judge opens one runner per side
and measures ``decisions`` independent runs of ``pairs`` interleaved pairs each, exactly as
the acceptance stage does (fresh inputs per pair, alternating order, judge-chosen checks,
the escape check on both sides). The host turns the raw pairs into false-accept rates,
power and spreads (``bench/calibration.py``).

A scenario's runners serve all its decisions, unless it asks for ``fresh_runners``: then
every decision gets a new pair, as every acceptance does, so that an offset that belongs
to one pair of runners (it stays for their life) counts in the spread between decisions
instead of shifting them all. A sandbox has 32 runner uids, never reused: such a scenario
stops when they run out (``stopped``), and the host starts another sandbox. Each decision
also records each side's median event time of an empty call (``empty_cur``,
``empty_cand``): whether an offset between two runners lies in their timing path itself.
With ``fresh_runners``, a decision whose measurement ended ``timing_unreliable``
(infrastructure: the host too loaded to time on, which an acceptance would retry) is dropped
and recorded in ``dropped``, and the next decision gets its fresh pair as usual; after
:data:`MAX_DROPPED` of them the failure ends the run, as any other does. (A decision lost
that way ended its whole sandbox before: on the H200, 10 of 24 sandboxes lost 2-10
decisions each.)
"""

from __future__ import annotations

import time
from typing import Any

from sandbox.contract.failure import StageFailure
from sandbox.judge import prestart
from sandbox.judge.acceptance import measure_pairs
from sandbox.judge.benchmark import warm_up
from sandbox.judge.evaluation import Evaluation
from sandbox.judge.sides import Side, paired_buffers
from sandbox.launcher.identity import runner_ids_left

NEXT_MARGIN = 1.5  # times the mean decision so far that must be left for the next one
MAX_DROPPED = 3  # timing_unreliable decisions a scenario drops before the failure ends the run


def _sig(x: float) -> float:
    return float(f"{x:.6g}")


def run_calibration(ev: Evaluation) -> None:
    assert ev.req.calibrate is not None
    ev.stage = "accept"
    ev.calibration = out = {}  # partial results survive a failure later on
    for sc in ev.req.calibrate.scenarios:
        t0 = time.monotonic()
        fresh = bool(sc.get("fresh_runners", False))
        decisions: list[dict[str, Any]] = []
        dropped: list[dict[str, str]] = []  # in the record only when there are some
        out[sc["name"]] = {"decisions": decisions, "seconds": 0.0}
        sides: tuple[Side, Side] | None = None
        want, n = int(sc.get("decisions", ev.req.calibrate.decisions)), 0
        while len(decisions) < want:
            # The next decision must fit, at the mean so far (fresh runners: their imports
            # too) with NEXT_MARGIN: a loaded host makes fewer decisions, never a timeout.
            need = NEXT_MARGIN * (time.monotonic() - t0) / n if n else 0.0
            if ev.left(ev.run_deadline) < float(sc.get("reserve_s", 30)) + need or \
                    time.monotonic() - t0 + need > float(sc.get("budget_s", 1e9)):
                if n:
                    out[sc["name"]]["stopped"] = "the run's time is used up"
                break
            n += 1  # measurements begun, made or dropped
            if sides is not None and fresh:
                for side in sides:
                    ev.close_side(side)
                sides = None
            if sides is None:
                if fresh and runner_ids_left() < 2 and not all(
                        prestart.ready_count(sc[k]) for k in ("candidate", "current")):
                    out[sc["name"]]["stopped"] = "runner uids of this sandbox used up"
                    break
                sides = _open(ev, sc)
            cand, cur = sides
            empty: dict[str, float] = {}
            try:
                d = measure_pairs(ev, cand, cur, int(sc.get("pairs", ev.req.calibrate.pairs)),
                                  False, calls_per_pair=int(sc.get("calls_per_pair", 1)),
                                  empty=empty)
            except StageFailure as e:
                if not (fresh and e.error.origin == "infrastructure"
                        and e.error.code.endswith("timing_unreliable")) or len(dropped) >= MAX_DROPPED:
                    raise
                dropped.append({"code": e.error.code, "message": e.error.message[:400]})
                out[sc["name"]]["dropped"] = dropped
                continue  # this pair is closed at the top of the loop; the next is fresh
            decisions.append({"t_cur": [_sig(t) for t in d.t_cur], "t_cand": [_sig(t) for t in d.t_cand],
                              "empty_cur": _sig(empty["cur"]), "empty_cand": _sig(empty["cand"])})
            out[sc["name"]]["seconds"] = round(time.monotonic() - t0, 2)
        for side in sides or ():
            ev.close_side(side)


def _open(ev: Evaluation, sc: dict[str, Any]) -> tuple[Side, Side]:
    """A pair of fresh runners for the scenario, set up, loaded and warmed up together."""
    ev.compile_deadline = time.monotonic() + ev.req.limits.compile_s
    bufs = paired_buffers(ev.nbytes) if ev.dev == "cuda" else ((), ())
    cand, cur = ev.open_sides([(sc["candidate"], bufs[0]), (sc["current"], bufs[1])], "compile")
    warm_up(ev, [cand, cur], ev.slots(), "accept")
    return cand, cur
