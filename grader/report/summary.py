"""Turning a verified judge payload and the backend's outcome into the report."""

from __future__ import annotations

from grader.backends.base import SandboxOutcome
from grader.measure.accept import decide
from grader.report.model import (
    AcceptanceResult,
    BadElement,
    CorrectnessResult,
    Report,
    StageError,
    TimingStats,
)
from grader.report.record import JudgePayload, JudgeTiming
from grader.task import TaskSpec


def timing_stats(spec: TaskSpec, t: JudgeTiming, device: str, floor: float | None = None) -> TimingStats:
    unmeasured: dict[str, str] = {}
    if t.device_state_unmeasured:
        unmeasured["device_state"] = t.device_state_unmeasured
    bw = tf = None
    if spec.cost_model is None:
        unmeasured["bandwidth_gbps"] = unmeasured["tflops"] = "the task has no cost model"
    elif t.median <= 0:
        unmeasured["bandwidth_gbps"] = unmeasured["tflops"] = "median time is zero"
    else:
        nbytes, flops = spec.cost_model.evaluate(t.dims)
        bw = nbytes / (t.median * 1e-3) / 1e9
        tf = flops / (t.median * 1e-3) / 1e12
    return TimingStats(samples=t.n, mean_ms=t.mean, median_ms=t.median, p95_ms=t.p95, std_ms=t.std,
                       min_ms=t.min, cv=t.cv, bandwidth_gbps=bw, tflops=tf, device=device,
                       clock=t.clock, cache=t.cache, dims=t.dims, checked_calls=t.checked_calls,
                       check_policy=t.check_policy, flagged_samples=t.flagged_samples,
                       roofline_floor_ms=floor, device_state=t.device_state, unmeasured=unmeasured)


def _reclassify(err: StageError, outcome: SandboxOutcome) -> StageError:
    """A runner SIGKILLed while a cgroup limit fired was killed by that limit."""
    if err.code in ("signal", "early_exit") and outcome.oom_killed:
        return err.model_copy(update={"code": "memory_limit",
                                      "message": "memory limit reached (the kernel's OOM killer "
                                                 f"ended the runner): {err.message}"})
    if err.code in ("signal", "exception", "early_exit") and outcome.pids_limited:
        return err.model_copy(update={"code": "pids_limit",
                                      "message": f"process/thread limit reached: {err.message}"})
    return err


def build_report(report: Report, spec: TaskSpec, p: JudgePayload, outcome: SandboxOutcome) -> Report:
    report.stage = p.stage
    report.environment = p.environment
    report.device = (p.environment.get("device_name") and f"{p.device}: {p.environment['device_name']}") or p.device
    report.warnings += p.warnings
    report.errors += [_reclassify(StageError(**e.model_dump()), outcome) for e in p.errors]
    if p.correctness is not None:
        c = p.correctness
        report.correctness = CorrectnessResult(
            passed=c.passed and not any(e.stage == "correctness" for e in report.errors),
            checks=c.checks, shapes_checked=c.shapes_checked, seeds=c.seeds,
            max_abs_error=c.max_abs_error, max_rel_error=c.max_rel_error,
            mismatch_fraction=c.mismatch_fraction,
            first_bad=BadElement(**c.first_bad) if c.first_bad else None)
    if p.timing is not None:
        report.timing = timing_stats(spec, p.timing, report.device or p.device)
    if p.diagnostics is not None:  # the sanitizer's result and overhead
        from grader.diagnostics.run import build_diagnostics

        report.diagnostics = build_diagnostics(p.diagnostics, spec=spec)
    if p.acceptance is not None:
        a = p.acceptance
        report.acceptance = decide(a.t_cur, a.t_cand, spec.acceptance)
        rep = a.replicate or {}
        rc, rd = rep.get("t_cur"), rep.get("t_cand")
        if isinstance(rc, list) and isinstance(rd, list) and rc and rd:
            speedup = float(sorted(rc)[len(rc) // 2]) / float(sorted(rd)[len(rd) // 2])
            report.acceptance.replicate_speedup = speedup
            if report.acceptance.accepted and speedup < 1.0:
                # Winner's curse guard: an independent replicate that contradicts the
                # deciding run (candidate slower) turns the acceptance into a rejection.
                report.acceptance.accepted = False
                report.acceptance.reason = (f"not confirmed: the independent replicate measured a "
                                            f"speed-up of {speedup:.4f}x (< 1); "
                                            f"deciding run said: {report.acceptance.reason}")
        else:
            if report.acceptance.accepted:
                report.acceptance.accepted = False
                report.acceptance.reason = "not confirmed: the independent replicate did not run"
            report.acceptance.unmeasured["replicate_speedup"] = (
                "no replicate: the candidate was not faster in the deciding run"
                if not rep else f"replicate failed: {rep.get('error', 'no samples')}")
    elif any(e.stage == "accept" for e in report.errors):
        report.acceptance = AcceptanceResult(accepted=False, rule=spec.acceptance.rule,
                                             improvement_fraction=None, pairs=0,
                                             positive_fraction=None,
                                             reason=report.errors[-1].message[:500])
    if outcome.limit_fired and not report.errors:
        report.errors.append(StageError(stage=p.stage or "benchmark", code=outcome.limit_fired,
                                        message=f"the sandbox's {outcome.limit_fired} fired"))
    report.ok = not report.errors and (report.acceptance is None or report.acceptance.accepted)
    return report
