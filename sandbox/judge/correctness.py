"""The compile and correctness stages (judge side)."""

from __future__ import annotations

import time

from sandbox.judge import gpu_idle, prestart
from sandbox.judge.evaluation import Evaluation
from sandbox.judge.sides import Side, open_wait
from sandbox.launcher.gpu_share import create_context


def compile_stage(ev: Evaluation) -> Side:
    """Load the candidate and launch it once on the first tune shape (Triton JIT, autotune)."""
    ev.stage = "compile"
    assert ev.req.candidate is not None
    if ev.dev == "cuda":
        t = time.monotonic()
        device_ahead(ev, ev.req.candidate)
        ev.phase("compile_device", t)
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


def device_ahead(ev: Evaluation, path: str) -> None:
    """Every CUDA context the compile stage needs, made at once: the candidate's runner
    started ahead and the problem process are asked for theirs while the judge makes its
    own (one after another they were ~0.65 s of a warm evaluation on an H100: judge 0.3,
    runner 0.19, problem process 0.16). Then the idle device's probe, with every context
    made and before any candidate exists."""
    prestart.device_ahead(path)
    ev.problem.device_ahead()
    create_context()
    ev.problem.device_done()
    prestart.device_done(path, open_wait(ev))
    gpu_idle.calibrate()


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
