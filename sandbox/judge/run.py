"""The judge's modes, in stage order: what runs for a request, and the record it yields.

Imported by :mod:`sandbox.judge.main` only after the secret is gone and the process hardened
(this module imports torch).
"""

from __future__ import annotations

import time
import traceback
from typing import TYPE_CHECKING

from sandbox.contract import device_memory
from sandbox.contract.failure import StageFailure, infrastructure
from sandbox.contract.wire import WIRE_VERSION, ErrorStage, ErrorWire, JudgeRequest, Record
from sandbox.judge import progress
from sandbox.judge.device import device_environment, memory_figures
from sandbox.launcher.proc import RunnerFailure

if TYPE_CHECKING:
    from sandbox.judge.evaluation import Evaluation
    from sandbox.tools.nvml import Nvml


def _infra(code: str, e: BaseException, dev: str = "cpu", stage: ErrorStage = "sandbox",
           nv: Nvml | None = None) -> ErrorWire:
    """The judge's own failure ``e`` as ``code`` with its traceback's tail; or, when ``e`` is
    the device running out of memory (another job fills the GPU), ``device_out_of_memory``
    with its figures in one line (:mod:`sandbox.contract.device_memory`)."""
    if device_memory.is_device_oom(e):
        where = "the judge" + (f" ({stage} stage)" if stage != "sandbox" else "'s set-up")
        return device_memory.failure(stage, where, e, memory_figures(dev, nv)).error
    return infrastructure(code, "".join(traceback.format_exception(e))[-3000:]).error


def run_mode(req: JudgeRequest, started: tuple[float, float], gate_wait: float = 0.0) -> Record:
    """``started``: the judge's (wall, monotonic) start, for the phase figures;
    ``gate_wait``: seconds it waited for its turn at the device (not part of any phase)."""
    if req.mode == "measure_peak":
        return _measure_peak(req)
    if req.mode == "check":  # is the task sound? (no candidate; sandbox.judge.task_check)
        from sandbox.judge.task_check import run_check

        return run_check(req)
    from sandbox.judge.evaluation import Evaluation

    try:
        ev = Evaluation(req)
        ev.started_wall = started[0]
        ev.phase("judge_ready", started[1] + gate_wait)
        progress.tell("judge_ready", "done", ev.phases.get("judge_ready", 0.0))
        if req.gated:
            ev.phases["gate_wait"] = round(gate_wait, 4)
    except StageFailure as e:
        return Record(wire_version=WIRE_VERSION, stage="sandbox", errors=(e.error,), warnings=(),
                      device=req.device, environment={})
    except Exception as e:  # the task's reference or the device failed: not the candidate
        return Record(wire_version=WIRE_VERSION, stage="sandbox",
                      errors=(_infra("judge_setup_failed", e, req.device),), warnings=(), device=req.device,
                      environment={})
    try:
        if req.mode == "calibrate":
            from sandbox.judge.rule_calibration import run_calibration

            run_calibration(ev)
        elif req.mode == "profile":  # hardware counters under ncu
            from sandbox.tools.profiling import run_profile

            run_profile(ev)
        else:
            _evaluate(ev)
    # Each error is stamped with the time it was recorded at (sandbox.judge.taint).
    except StageFailure as e:
        ev.errors.append(ev.taint.stamp(e.error))
    except RunnerFailure as e:  # pragma: no cover - the stages convert these themselves
        ev.errors.append(ev.taint.stamp(ev.failure(ev.stage or "compile", e).error))
    except Exception as e:  # the judge's own bug: an infrastructure fault, never a pass
        ev.errors.append(ev.taint.stamp(_infra("judge_error", e, ev.dev, ev.stage or "sandbox",
                                                ev.nvml_handle)))
    finally:
        t = time.monotonic()
        ev.shutdown()
        ev.phase("close", t)  # runners and the problem process closed, their builds out
    return ev.record()


def _evaluate(ev: Evaluation) -> None:
    from sandbox.judge.acceptance import acceptance_stage
    from sandbox.judge.benchmark import benchmark_stage
    from sandbox.judge.correctness import compile_stage, correctness_stage

    t = _begin("compile")
    cand = compile_stage(ev)
    _end(ev, "compile", t)
    if "correctness" in ev.req.stages:
        t = _begin("correctness")
        if ev.req.sanitize is not None:  # under compute-sanitizer, in a runner of its own
            from sandbox.tools.profiling import sanitized_correctness

            sanitized_correctness(ev, cand)
        else:
            correctness_stage(ev, cand)
        _end(ev, "correctness", t)
    if "benchmark" in ev.req.stages:
        t = _begin("benchmark")
        ev.timing = benchmark_stage(ev, cand)
        _end(ev, "benchmark", t)
    if ev.req.current:
        t = _begin("accept")
        ev.acceptance = acceptance_stage(ev, cand)
        _end(ev, "accept", t)


def _begin(stage: str) -> float:
    """A stage begins: told to the host live (sandbox.judge.progress); its start time."""
    progress.tell(stage, "start")
    return time.monotonic()


def _end(ev: Evaluation, stage: str, t0: float) -> None:
    """A stage ended without a failure: its phase, and the host told."""
    ev.phase(stage, t0)
    progress.tell(stage, "done", ev.phases[stage])


def _measure_peak(req: JudgeRequest) -> Record:
    """Calibration mode: no candidate at all, only the device's ceilings."""
    from sandbox.tools.peaks import measure_peak

    env = device_environment(req.device)
    try:
        peaks = measure_peak(req.device, req.quick)
    except Exception as e:
        return Record(wire_version=WIRE_VERSION, stage=None,
                      errors=(_infra("calibration_failed", e, req.device),),
                      warnings=(), device=req.device, environment=env)
    return Record(wire_version=WIRE_VERSION, stage=None, errors=(), warnings=(), device=req.device,
                  environment=env, peaks=peaks)
