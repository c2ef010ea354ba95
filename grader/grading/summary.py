"""Turning a verified judge record and the backend's outcome into the report.

The report's parts are built from the wire record (:mod:`sandbox.contract.wire`), never beside
it; the acceptance decision, the replicate's veto included, is :mod:`grader.measure.accept`'s.
"""

from __future__ import annotations

import signal

from grader.backends.base import EndedBy, SandboxOutcome
from grader.backends.cleanup import MIN_FREE_BYTES
from grader.backends.registry import backend_class
from grader.diagnostics.records import build_diagnostics
from grader.errors import KgraderError
from grader.formats import registry
from grader.grading.shared_device import account_for_shared_device
from grader.measure.accept import decide_with_replicate
from grader.report.model import (
    AcceptanceResult,
    BadElement,
    CorrectnessResult,
    Report,
    ReportError,
    Taint,
    TimingStats,
)
from grader.report.record import ResultProblem
from grader.task import TaskSpec
from sandbox.contract import codes, text, wire

# ReportError.message's own cap: a longer message is cut, never a reason to fail the report.
MESSAGE_MAX = 4000


def timing_stats(spec: TaskSpec, t: wire.TimingRecord, device: str,
                 floor: float | None = None) -> TimingStats:
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
                       clock=t.clock, mode=t.mode, cache=t.cache, launch_lead_us=t.launch_lead_us, dims=t.dims,
                       checked_calls=t.checked_calls, check_policy=t.check_policy,
                       requested_calls=t.requested_calls or None, stopped_by=t.stopped_by,
                       flagged_samples=t.flagged_samples, roofline_floor_ms=floor,
                       device_state=list(t.device_state), escape=dict(t.escape),
                       unmeasured=unmeasured,
                       clocks={"samples_ms": list(t.samples_ms), "judge_ms": list(t.judge_ms),
                               "noop_overhead_ms": list(t.noop_overhead_ms),
                               **({"wait_ms": list(t.wait_ms), "noop_wait_ms": list(t.noop_wait_ms)}
                                  if t.wait_ms else {})})


# Codes a stage's lack of time explains: memory pressure may be why the time ran out.
SLOWED_BY_MEMORY = frozenset({"compile_timeout", "timeout", "harness_timeout"})


def _unvouched_runner_kill(outcome: SandboxOutcome) -> str | None:
    """Why the host cannot confirm a judge's ``runner_killed`` (a SIGKILL the judge did not
    send, which the runner's seccomp filter makes impossible to inflict on itself), or
    None: the same facts as :func:`judge_killed_from_outside`."""
    if outcome.limit_fired is not None or outcome.timed_out:
        return f"a limit of the sandbox fired ({outcome.limit_fired or 'timeout'})"
    if outcome.cgroup_lost:  # removed from outside (only root on the host can)
        return None
    if outcome.oom_killed:
        return "the sandbox's memory cgroup counted an OOM kill"
    if not outcome.oom_counted:
        return ("this sandbox has no memory cgroup counting OOM kills, so the kernel's OOM "
                "killer cannot be ruled out")
    if outcome.pids_limited:
        return "the sandbox's process limit was reached"
    return None


def _error(e: wire.ErrorWire, outcome: SandboxOutcome) -> ReportError:
    """The judge's error as reported; a runner killed while a limit fired was killed by it."""
    code, message, origin = e.code, e.message, e.origin
    why = (_unvouched_runner_kill(outcome) if code.removeprefix(codes.CURRENT) == "runner_killed"
           else None)
    if why is not None:  # fail closed: the candidate's crash, as before the filter existed
        code, origin = ("current_" if code.startswith("current_") else "") + "signal", "candidate"
        message = f"runner killed by SIGKILL, and {why}"
    if code in ("signal", "early_exit") and outcome.oom_killed:
        code, message = "memory_limit", ("memory limit reached (the kernel's OOM killer "
                                         f"ended the runner): {message}")
    elif code in ("signal", "exception", "early_exit") and outcome.pids_limited:
        code, message = "pids_limit", f"process/thread limit reached: {message}"
    detail = dict(e.detail)
    if code in SLOWED_BY_MEMORY and outcome.memory_limit_hits > 0:
        # A build beside three Python processes under 4 GiB on an H200: the cgroup reclaimed
        # the tree's pages for minutes and the compile stage ran out of time.
        message = (f"{message} (the sandbox reached its memory limit {outcome.memory_limit_hits} "
                   "times: the kernel reclaimed its pages, which slows every process in it; "
                   "raise limits.memory_mib)")
        detail["memory_limit_hits"] = outcome.memory_limit_hits
    return ReportError(stage=e.stage, code=code, origin=origin,
                       message=text.clean(message, MESSAGE_MAX), line=e.line, detail=detail,
                       after_hidden=e.after_hidden)


def _ended_by(outcome: SandboxOutcome) -> EndedBy | None:
    """The outcome's backend's explanation of a lost record (none for an unknown name)."""
    try:
        return backend_class(outcome.backend).ended_by(outcome)
    except KgraderError:
        return None


# Signals a process sends (kill(1), a daemon's shutdown); a fault of the judge's own
# (SIGSEGV, SIGABRT, SIGBUS, SIGSYS) may be provoked by what a runner fed it: not these.
SENT_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


def judge_killed_from_outside(outcome: SandboxOutcome) -> bool:
    """A judge that died of a sent signal when none of the sandbox's limits fired and the
    kernel counts OOM kills (a memory cgroup) and counted none: the signal came from
    outside. Inside, the runners run under other uids with no capability (they cannot
    signal the judge), and the launcher has exec'd into the judge; the host's own kills
    are its limits. Without a counted OOM (an RSS watchdog only) a kernel OOM kill cannot
    be ruled out, so that stays the candidate's ``judge_died`` (fail closed). A candidate
    that could provoke this gains a retry, never a pass. A sandbox whose cgroup was
    removed under it (``cgroup_lost``: only root on the host can) was killed from outside
    too, though its OOM count went with the cgroup."""
    if outcome.signal not in SENT_SIGNALS or outcome.limit_fired is not None or outcome.timed_out:
        return False
    return outcome.cgroup_lost or (outcome.oom_counted and not outcome.oom_killed
                                   and not outcome.pids_limited)


def _signame(sig: int | None) -> str:
    try:
        return signal.Signals(sig).name if sig is not None else "a signal"
    except ValueError:
        return f"signal {sig}"


def no_record_error(p: ResultProblem, outcome: SandboxOutcome,
                    out_free: int | None = None) -> ReportError:
    """No verified record. Whose fault: a limit that fired, or a candidate that killed the
    judge or forged, flooded or planted the record, is the candidate's; an authentic
    record the host cannot read (version skew, a judge bug) is the infrastructure's."""
    if p.authentic:
        return ReportError(stage="sandbox", code=p.code, origin="infrastructure", message=p.message)
    if outcome.limit_fired is not None:
        return ReportError(stage="benchmark" if outcome.limit_fired == "timeout" else "compile",
                           code=outcome.limit_fired, origin="candidate",
                           message=f"the sandbox was stopped by its {outcome.limit_fired} before "
                                   "the judge could report; the stage it was in is unknown"
                                   + (f" (it had reached its memory limit {outcome.memory_limit_hits}"
                                      " times: reclaim slows every process in it; raise "
                                      "limits.memory_mib)" if outcome.limit_fired == "timeout"
                                      and outcome.memory_limit_hits > 0 else ""),
                           detail={"stage_unknown": True, "record": p.code})
    if p.code == "result_missing" and out_free is not None and out_free < MIN_FREE_BYTES:
        # No runner can write to the host's disk (a tmpfs scratch, RLIMIT_FSIZE, the judge's
        # folder is the judge's uid's): a full disk there is the host's.
        return ReportError(stage="sandbox", code="disk_full", origin="infrastructure",
                           message=f"the judge left no record, and the host's folder for it "
                                   f"has {out_free >> 10} KiB free: free space in TMPDIR, or "
                                   "point it at a folder with room; retry",
                           detail={"free_bytes": out_free, "exit_code": outcome.exit_code,
                                   "signal": outcome.signal})
    if p.code == "result_missing" and (ended := _ended_by(outcome)) is not None:
        # A cause only the backend can read from its outcome (docker: the judge's stdin
        # attach closed, or its init was signalled from outside).
        return ReportError(stage="sandbox", code=ended.code, origin="infrastructure",
                           message=ended.message,
                           detail={"exit_code": outcome.exit_code, "signal": outcome.signal})
    if p.code == "result_missing" and judge_killed_from_outside(outcome):
        return ReportError(stage="sandbox", code="judge_killed", origin="infrastructure",
                           message=f"the judge was killed by {_signame(outcome.signal)} from "
                                   "outside the sandbox: no limit fired, the kernel counted no "
                                   "OOM kill, and no process inside can signal the judge "
                                   "(another uid, no capability); retry",
                           detail={"exit_code": outcome.exit_code, "signal": outcome.signal})
    if p.code == "result_missing":
        return ReportError(stage="integrity", code="judge_died", origin="candidate",
                           message="the judge ended without a verified result: a runner killed it "
                                   f"or its sandbox (exit={outcome.exit_code} "
                                   f"signal={outcome.signal})",
                           detail={"exit_code": outcome.exit_code, "signal": outcome.signal})
    return ReportError(stage="integrity", code=p.code, origin="candidate", message=p.message)


def expected_call(spec: TaskSpec) -> str | None:
    """How the task calls the candidate's entry point, as its format says (None: an entry
    that is a class, KernelBench's)."""
    return registry.for_contract(spec.contract).expected_call(spec)


def _name_the_signature(e: ReportError, spec: TaskSpec) -> ReportError:
    """A TypeError from calling the entry point itself ("launch() takes 2 positional
    arguments but 3 were given") also says how the task calls it; the candidate's text is
    kept as it was, the task's appended."""
    call = expected_call(spec)
    if (call is None or e.code != "exception"
            or not e.message.startswith(f"TypeError: {spec.entrypoint}() ")
            or "argument" not in e.message):
        return e
    message = text.clean(f"{e.message}; the task calls {call}", MESSAGE_MAX)
    return e.model_copy(update={"message": message,
                                "detail": {**e.detail, "expected_call": call}})


def build_report(report: Report, spec: TaskSpec, rec: wire.Record, outcome: SandboxOutcome) -> Report:
    report.stage = rec.stage
    report.environment = rec.environment
    name = rec.environment.get("device_name")
    report.device = f"{rec.device}: {name}" if name else rec.device
    report.warnings += list(rec.warnings)
    report.errors += [_name_the_signature(_error(e, outcome), spec) for e in rec.errors]
    if rec.taint is not None:  # the judge's mark, read as written (grader.grading.redact)
        t = rec.taint
        report.taint = Taint(hidden_phase=t.hidden_phase, sections=list(t.sections),
                             phases=list(t.phases))
    if rec.correctness is not None:
        c = rec.correctness
        report.correctness = CorrectnessResult(
            passed=c.passed and not any(e.stage == "correctness" for e in report.errors),
            checks=c.checks, shapes_checked=list(c.shapes_checked), seeds=c.seeds,
            max_abs_error=c.max_abs_error, max_rel_error=c.max_rel_error,
            mismatch_fraction=c.mismatch_fraction,
            first_bad=BadElement(**c.first_bad) if c.first_bad else None)
    if rec.timing is not None:
        report.timing = timing_stats(spec, rec.timing, report.device or rec.device)
    if rec.diagnostics is not None:  # the sanitizer's result and overhead
        report.diagnostics = build_diagnostics(rec.diagnostics, spec=spec)
    if rec.acceptance is not None:
        report.acceptance = decide_with_replicate(rec.acceptance, spec.acceptance)
    elif any(e.stage == "accept" for e in report.errors):
        report.acceptance = AcceptanceResult(accepted=False, rule=spec.acceptance.rule,
                                             improvement_fraction=None, pairs=0,
                                             positive_fraction=None,
                                             reason=report.errors[-1].message[:500])
    if outcome.limit_fired and not report.errors:
        report.errors.append(ReportError(stage=rec.stage or "benchmark", code=outcome.limit_fired,
                                         origin="candidate",
                                         message=f"the sandbox's {outcome.limit_fired} fired"))
    account_for_shared_device(report, outcome)
    if any(e.stage == "integrity" for e in report.errors):
        report.stage = "integrity"
    report.ok = not report.errors and (report.acceptance is None or report.acceptance.accepted)
    return report
