"""``check`` mode: is a task sound before anyone is graded on it? (judge side)

No candidate runs. For every shape of the task the judge lays the tensors out (a field
problem's generator runs here), draws inputs, and runs the trusted reference twice on
inputs drawn twice from one seed (the reference and its generator must be deterministic),
then once more in float64: the task's tolerances must hold between the reference in its
own dtypes and that float64 evaluation, or honest kernels fail at random. The host
decides from these figures (``grader.tasks.check``). The problem's code runs in the
sandbox, in its own process (:mod:`sandbox.problem.host`): the host never imports torch,
and the judge never executes it.
"""

from __future__ import annotations

import random
import time
import traceback
from typing import Any

import torch

from sandbox.contract.wire import WIRE_VERSION, ErrorWire, JudgeRequest, Record
from sandbox.judge.device import device_environment
from sandbox.judge.failure import StageFailure
from sandbox.problem.base import Problem
from sandbox.problem.host import make_problem
from sandbox.problem.tensors import compare, dtype_code, total_bytes


def run_check(req: JudgeRequest) -> Record:
    assert req.task is not None
    task, dev = req.task, "cuda" if req.device == "cuda" else "cpu"
    rng = random.Random(req.phase_seed)
    env = device_environment(req.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        problem = make_problem(task, req.reference, dev, rng)
    except Exception as e:
        return Record(wire_version=WIRE_VERSION, stage="sandbox", errors=(_error(e),),
                      warnings=(), device=req.device, environment=env)
    shapes = [("tune", d) for d in task.tune] + [("hidden", d) for d in task.hidden]
    try:
        results = [_check_shape(problem, kind, dims, rng.getrandbits(62), task.correctness)
                   for kind, dims in shapes]
    finally:
        problem.close()
    return Record(wire_version=WIRE_VERSION, stage=None, errors=(), warnings=(), device=req.device,
                  environment=env, check={"shapes": results})


def _error(e: BaseException) -> ErrorWire:
    if isinstance(e, StageFailure):
        return e.error
    return ErrorWire(stage="sandbox", code="reference_failed", origin="infrastructure",
                     message="".join(traceback.format_exception(e))[-3000:])


def _check_shape(problem: Problem, kind: str, dims: dict[str, int], seed: int,
                 c: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind, "dims": dict(dims)}
    try:
        slots = problem.layout(dims)
        out["bytes"] = total_bytes(slots)
        out["tensors"] = [{"name": s.name, "role": s.role, "dtype": s.dtype, "shape": list(s.shape)}
                          for s in slots]
        t0 = time.perf_counter()
        first = problem.reference(slots, problem.inputs(slots, seed))
        out["reference_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
        inputs = problem.inputs(slots, seed)
        second = problem.reference(slots, inputs)
        out["deterministic"] = all(_same(first[k], second[k]) for k in first)
    except Exception as e:
        out["error"] = _message(e)
        return out
    try:
        wide = problem.reference(slots, inputs, float64=True)
    except Exception as e:
        out["float64_error"] = _message(e)
        return out
    worst: dict[str, Any] = {"ok": True, "max_abs": 0.0, "max_rel": 0.0, "mismatch_fraction": 0.0}
    for name, got in first.items():
        atol, rtol = c.tolerance(dtype_code(got.dtype))
        cmp = compare(got.to(torch.float64), wide[name].to(torch.float64), atol, rtol,
                      c.max_mismatch_fraction)
        worst["ok"] = worst["ok"] and cmp.ok
        for key, v in (("max_abs", cmp.max_abs), ("max_rel", cmp.max_rel),
                       ("mismatch_fraction", cmp.mismatch_fraction)):
            if v is not None and v == v:
                worst[key] = max(worst[key], float(v))
        if not cmp.ok and "first_bad" not in worst:
            worst["first_bad"] = {"tensor": name, **(cmp.first_bad or {})}
    out["float64"] = worst
    return out


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        return bool(torch.equal(a.nan_to_num(0.125, 1.5, -1.5), b.nan_to_num(0.125, 1.5, -1.5))
                    and torch.equal(a.isnan(), b.isnan()))
    return bool(torch.equal(a, b))


def _message(e: BaseException) -> str:
    if isinstance(e, StageFailure):
        return e.error.message[:1000]
    return f"{type(e).__name__}: {e}"[:1000]
