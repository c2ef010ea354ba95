"""The compile and correctness stages (judge side)."""

from __future__ import annotations

import time

from sandbox.judge import gpu_idle
from sandbox.judge.evaluation import Evaluation
from sandbox.judge.sides import Side


def compile_stage(ev: Evaluation) -> Side:
    """Load the candidate and launch it once on the first tune shape (Triton JIT, autotune)."""
    ev.stage = "compile"
    assert ev.req.candidate is not None
    if ev.dev == "cuda":
        gpu_idle.calibrate()  # the idle device's probe, before any candidate exists
    cand = ev.open_side(ev.req.candidate, "compile")
    first = ev.task.tune[0]
    t = time.monotonic()
    slots = ev.slots(first)
    inputs = ev.inputs(slots, ev.task.correctness.seeds[0])
    ev.phase("compile_inputs", t)
    t = time.monotonic()
    ev.call(cand, slots, inputs, stage="compile", deadline=ev.compile_deadline, expected=None,
            where={"dims": dict(first), "phase": "compile"})
    ev.phase("compile_first_call", t)  # JIT compilation and autotuning happen here
    ev.compile_s = round(time.monotonic() - ev.t0, 3)
    ev.start_run_clock()
    return cand


def correctness_stage(ev: Evaluation, side: Side) -> None:
    """Every shape of the requested kinds, on every seed, against the trusted reference."""
    ev.stage = "correctness"
    c = ev.task.correctness
    checks, shapes = 0, []
    for kind in ev.req.shape_kinds:
        for i, dims in enumerate(ev.task.tune if kind == "tune" else ev.task.hidden):
            slots = ev.slots(dims)
            for seed in c.seeds:
                mixed = seed * 1_000_003 + i * 7919 + (0 if kind == "tune" else 104_729)
                inputs = ev.inputs(slots, mixed)
                expected = ev.reference(slots, inputs)
                where = {"dims": dict(dims), "seed": seed, "shape_kind": kind, "phase": "correctness"}
                ev.call(side, slots, inputs, stage="correctness", deadline=ev.run_deadline,
                        expected=expected, where=where)
                checks += 1
            shapes.append(dict(dims))
    ev.correctness.update({"passed": True, "checks": checks, "shapes_checked": shapes,
                           "seeds": len(c.seeds)})
