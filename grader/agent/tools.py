"""Agent tools as a Python API: compile, bench, profile, calibrate, accept.

Each tool takes a **workspace** and (except :func:`measure_peak`) kernel source as a
string, and returns a plain JSON-able dict. The agent can change only the source: the
task, its shapes and tolerances, the backend and the device are fixed by the operator in
``WORKSPACE/kgrader.json`` (written once by :func:`init_workspace` /
``kgrader workspace init``)::

    {"task": "/abs/path/to/task_dir", "backend": "bwrap", "device": "cpu",
     "policy": null, "quick_calibration": false, "hardware": null, "gpu_ids": []}

Layout of a workspace: ``kgrader.json``; ``records/`` (a :class:`grader.records.Records`
root: ``tool-calls.jsonl`` logs every call with its full return, ``evals/`` and
``trajectory.jsonl`` hold acceptance decisions, ``records/best.py`` is the current best);
``.tool.lock`` serialises tool calls on the workspace (across processes), so two
timings never overlap on it.

Returned fields (absent stage = ``null`` fields plus the reason in ``unmeasured``):

* every tool: ``tool``, ``ok``, ``stage`` (last stage reached), ``errors`` (each with
  ``stage``, ``code``, ``message``, ``line``), ``warnings``;
* bench/profile/accept: ``correct``, ``mean_ms``, ``median_ms``, ``p95_ms``, ``std_ms``,
  ``min_ms``, ``cv``, ``samples``, ``bandwidth_gbps``, ``tflops`` (effective, from the
  task's cost model), ``dims``;
* profile: ``ai``, ``bound``, ``bottleneck``, ``bandwidth_utilization_pct``,
  ``compute_utilization_pct``, ``roofline_fraction``, ``sm_saturation_pct`` (an alias of
  ``compute_utilization_pct``, not SM occupancy) and the rest of :class:`grader.measure.profile.Profile`;
  ``advice`` (at most five sentences per kernel, ``"kernel: sentence"``) and ``diagnostics``
  (:class:`grader.report.diagnostics_model.Diagnostics`: per-kernel Nsight Compute counters from a
  separate, untimed profile run; ``null`` fields with reasons where there are none);
* accept: ``accepted``, ``improvementFraction`` (the report's
  ``acceptance.improvement_fraction``, under the name the tools have always used: the
  median of ``(t_best - t_cand)/t_best``, so -17.09 is a kernel 18.1x slower, never read
  it as a percentage), ``verdict`` (the human report's headline in words,
  :func:`grader.report.verdict.acceptance_verdict`: "1.42x faster than best.py (98% CI
  1.38-1.46), accepted" / "18.1x slower than best.py (0.0553x, ...), rejected" / "same
  within noise" / "ambiguous: more pairs needed"; null with no pairing), ``baseline``
  (``"best"`` or ``"none"``), ``evaluation`` (the records folder);
* bench/accept: ``reference_ms``, ``speedup_vs_reference``, ``best_ms``,
  ``speedup_vs_best``, ``candidate_paired_ms``, each with its ``*_source``
  (:mod:`grader.agent.speed`: bench pairs the candidate with the trusted reference in the
  same sandbox run; ``ok`` there is compile + correctness + benchmark, never the pair);
  accept also ``slower_than_reference``.
* describe_task: :mod:`grader.agent.describe`.

**Acceptance without a best.** With no ``best.py`` yet, there is nothing to pair with:
the candidate is accepted when it passes compile, correctness (tune and hidden shapes)
and benchmark, and becomes ``best.py`` even when slower than the reference, **never
silently**: the result then has ``slower_than_reference: true``, a warning and a reason
saying how much slower (the reference's time as in :mod:`grader.agent.speed`). (On the
CPU interpreter every Triton kernel is slower than a PyTorch reference, and an agent loop
needs a baseline to pair later candidates with; a loop that wants only kernels faster than
the reference reads the flag.) ``improvementFraction`` stays ``null`` (no best to pair
with). Every later candidate must beat ``best.py`` in a paired, interleaved run.

Candidate faults are values (``ok: false``); a broken workspace raises
:class:`WorkspaceError`; an infrastructure fault is ``ok: false`` with stage ``sandbox``.

**Hidden shapes never come back.** Every result is built from the candidate-facing copy
of the report (:func:`grader.grading.redact.redact`): a hidden shape is
``{"hidden_shape": k}`` / "hidden shape #k", and the text of a failure after the candidate
was called on a hidden shape is withheld. ``records/evals/`` keeps the operator's full
report; an agent must not be given read access to it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import filelock

from grader.agent import describe, remote, speed
from grader.agent.results import base, fault, not_reached, timing_fields
from grader.agent.schemas import TOOL_NAMES, check_args, tool_schemas
from grader.agent.workspace import (
    LOCK_NAME,
    Workspace,
    WorkspaceConfig,
    WorkspaceError,
    init_workspace,
)
from grader.diagnostics.run import diagnose
from grader.errors import KgraderError
from grader.evaluate import EvalRequest, Source, StageName, evaluate
from grader.experience.hooks import remember_records_folder, remember_tool
from grader.experience.search import (
    search_for_task,
)
from grader.grading.redact import (
    facts_for,
    redact,
    redact_diagnostics,
    scrub_tree,
)
from grader.measure.peaks import environment_mismatches, forget, get_peaks
from grader.measure.profile import analyze, with_counters
from grader.report.model import Report
from grader.report.verdict import acceptance_verdict
from grader.scan import check_source
from grader.task import load_task

__all__ = [
    "TOOL_NAMES",
    "Workspace",
    "WorkspaceConfig",
    "WorkspaceError",
    "accept_candidate",
    "bench_kernel",
    "call_tool",
    "compile_kernel",
    "describe_task",
    "init_workspace",
    "measure_peak",
    "profile_kernel",
    "search_experience",
    "tool_schemas",
]

def _ws(workspace: str | Path | Workspace) -> Workspace:
    return workspace if isinstance(workspace, Workspace) else Workspace.open(workspace)


def _public(ws: Workspace, report: Report) -> Report:
    """The copy of ``report`` the agent may read (hidden shapes redacted)."""
    return redact(report, facts_for(ws.spec, report))


def _evaluate(ws: Workspace, source: str, stages: tuple[StageName, ...],
              shape_kinds: tuple[str, ...], current: str | None = None,
              against_reference: bool = False, accept: bool = False) -> Report:
    """One evaluation; ``current`` pairs it with best.py, ``against_reference`` with the
    task's reference as a trusted second side (grader.agent.speed)."""
    if ws.config.server is not None:
        return remote.evaluate_remote(ws, check_source(source, "candidate"),
                                      remote.mode_for(stages, against_reference, accept))
    spec, reference = load_task(ws.task_dir)
    if against_reference:
        cur: Source | None = Source(name="reference.py", text=reference)
    elif current is not None:
        cur = Source(name="current.py", text=check_source(current, "current"))
    else:
        cur = None
    req = EvalRequest(task=spec, reference=reference,
                      candidate=Source(name="candidate.py", text=check_source(source, "candidate")),
                      current=cur, current_trusted=against_reference,
                      backend=ws.config.backend, device=ws.config.device,
                      policy=ws.config.policy, stages=stages,
                      shape_kinds=shape_kinds,
                      gpu_ids=tuple(ws.config.gpu_ids))
    return evaluate(req)


def _logged(name: str, workspace: str | Path | Workspace, args: dict[str, Any],
            body: Callable[[Workspace], dict[str, Any]]) -> dict[str, Any]:
    """Open the workspace, run ``body`` under the workspace lock, log the full return."""
    ws = _ws(workspace)
    with filelock.FileLock(str(ws.root / LOCK_NAME), timeout=3600):
        try:
            result = body(ws)
        except KgraderError as e:
            result = fault(name, e, facts_for(ws.spec))
        ws.records.log_tool_call(name, args, result)
    return result


# --- the tools ------------------------------------------------------------------------


def compile_kernel(workspace: str | Path | Workspace, source: str) -> dict[str, Any]:
    """Scan, import and launch once on the first tune shape; no correctness, no timing."""
    def body(ws: Workspace) -> dict[str, Any]:
        report = _evaluate(ws, source, ("compile",), ("tune",))
        remember_tool(ws.spec, report, source, "compile_kernel")
        compiled = report.ok and report.stage == "compile"
        if ws.config.server is not None:  # a whole evaluation there: did it get past compile?
            compiled = not any(e.stage in ("scan", "compile") for e in report.errors)
        return {**base("compile_kernel", _public(ws, report)), "compiled": compiled}
    return _logged("compile_kernel", workspace, {"source": source}, body)


def bench_kernel(workspace: str | Path | Workspace, source: str) -> dict[str, Any]:
    """Compile, re-check correctness on tune and hidden shapes, then time (the task's protocol)."""
    def body(ws: Workspace) -> dict[str, Any]:
        full = _evaluate(ws, source, ("compile", "correctness", "benchmark"), ("tune", "hidden"),
                         against_reference=True)
        # The pair with the reference only measures (speed.without_pair_faults).
        report = speed.without_pair_faults(full)[0]
        public, public_lost = speed.without_pair_faults(_public(ws, full))
        # The experience store keeps what bench measured, not the pair's rule outcome.
        remember_tool(ws.spec, report.model_copy(update={
            "acceptance": None, "ok": _passed(report),
            "stage": "benchmark" if report.stage == "accept" and _passed(report) else report.stage}),
            source, "bench_kernel")
        out = {**base("bench_kernel", public), **timing_fields(public)}
        # The pair with the reference is a measurement, not an acceptance: bench's verdict
        # and last stage are compile, correctness and benchmark's.
        out["ok"] = _passed(report)
        if out["stage"] == "accept" and not any(e["stage"] == "accept" for e in out["errors"]):
            out["stage"] = "benchmark"
        speed.merge(out, speed.paired_figures("reference", public),
                    speed.best_figures(ws, out["median_ms"]))
        if public_lost:
            e = public_lost[0]
            why = (f"the pair with the reference ended {e.code} ({e.origin}): {e.message}; the "
                   "candidate's own benchmark stands")
            out["unmeasured"]["speedup_vs_reference"] = why
            out["warnings"].append(f"bench: {why}")
        ref = out.get("reference_ms")
        if ref is not None and out["candidate_paired_ms"] is not None:
            speed.remember_reference(ws, ref, "paired", ws.spec.timed_dims())
        return out
    return _logged("bench_kernel", workspace, {"source": source}, body)


def _passed(report: Report) -> bool:
    """Compile, correctness and benchmark passed (whatever a pairing with another side said)."""
    return (not report.errors and report.correctness is not None and report.correctness.passed
            and report.timing is not None)


def describe_task(workspace: str | Path | Workspace) -> dict[str, Any]:
    """The task as the agent may know it: contract, tensors, tune shapes (hidden: a count),
    tolerances, protocol, policy, cost model and floor, the reference (grader.agent.describe)."""
    ws = _ws(workspace)  # read-only and host-side: no workspace lock, as search_experience
    try:
        result = describe.describe_task(ws)
    except KgraderError as e:
        result = fault("describe_task", e, facts_for(ws.spec))
    ws.records.log_tool_call("describe_task", {}, result)
    return result


def _calibration(ws: Workspace, refresh: bool = False) -> Any:
    return get_peaks(ws.config.backend, ws.config.device, refresh=refresh,
                     quick=ws.config.quick_calibration, path=ws.hardware_path)


def _profile_fields(ws: Workspace, report: Report, source: str) -> dict[str, Any]:
    warnings: list[str] = []
    peaks: dict[str, Any] | None = None
    calibration_error: str | None = None
    if report.timing is not None:
        try:
            cal = _calibration(ws)
            drift = environment_mismatches(cal.fingerprint, report.environment)
            if drift:
                # The probe missed a change the sandbox reports: drop the entry, re-measure.
                warnings.append(f"calibration fingerprint differs from this run ({'; '.join(drift)}); "
                                "recalibrated")
                forget(cal.probe_key, ws.hardware_path)
                cal = _calibration(ws, refresh=True)
            peaks = cal.peaks
        except KgraderError as e:
            calibration_error = f"calibration failed: {e}"
    prof = analyze(ws.spec, report.timing, peaks)
    # Counters and advice: a separate, untimed profile run (grader.diagnostics).
    diag = diagnose(ws.task_dir, source, report, prof, backend=ws.config.backend,
                    policy=ws.config.policy, peaks=peaks)
    prof = with_counters(prof, diag.kernels, diag.unmeasured.get("kernels"))
    fields = prof.as_tool_fields()
    if calibration_error is not None:
        fields["unmeasured"] = {k: calibration_error if v.startswith("no calibrated") else v
                                for k, v in fields["unmeasured"].items()}
        warnings.append(calibration_error)
    facts = facts_for(ws.spec, report)
    return {"profile": fields, "profile_warnings": warnings,
            "diagnostics": redact_diagnostics(diag, facts).model_dump(mode="json"),
            "advice": diag.advice}


def profile_kernel(workspace: str | Path | Workspace, source: str) -> dict[str, Any]:
    """bench_kernel plus a roofline analysis against the calibrated peaks."""
    def body(ws: Workspace) -> dict[str, Any]:
        remote.refuse_local_only(ws, "profile_kernel")
        report = _evaluate(ws, source, ("compile", "correctness", "benchmark"), ("tune", "hidden"))
        facts = facts_for(ws.spec, report)
        public = redact(report, facts)
        out = {**base("profile_kernel", public), **timing_fields(public)}
        # The roofline figures follow the median: from the candidate's copy, never the
        # operator's (times measured after hidden-shape calls are coarsened there).
        extra = scrub_tree(_profile_fields(ws, public, source), facts)
        prof: dict[str, Any] = extra["profile"]
        remember_tool(ws.spec, report, source, "profile_kernel", prof)
        out["warnings"] += extra["profile_warnings"]
        out.update(diagnostics=extra["diagnostics"], advice=extra["advice"])
        unmeasured = {**out["unmeasured"], **prof.pop("unmeasured")}
        # The timing's own effective bandwidth / tflops keep their names; the profile's
        # copies are the same numbers under achieved_*.
        out.update({k: v for k, v in prof.items() if k not in ("dims", "median_ms")})
        out["unmeasured"] = unmeasured
        return out
    return _logged("profile_kernel", workspace, {"source": source}, body)


def measure_peak(workspace: str | Path | Workspace) -> dict[str, Any]:
    """The device's calibrated peaks (cached per fingerprint; see grader.measure.peaks)."""
    def body(ws: Workspace) -> dict[str, Any]:
        remote.refuse_local_only(ws, "measure_peak")
        cal = _calibration(ws)
        peaks = cal.peaks
        return {"tool": "measure_peak", "ok": True, "stage": None, "errors": [], "warnings": [],
                "bandwidth_gbps": peaks.get("bandwidth_gbps"), "tflops": peaks.get("tflops"),
                "matmul_tflops": peaks.get("matmul_tflops"), "peaks": peaks,
                "device": cal.device, "backend": cal.backend, "environment": cal.environment,
                "fingerprint": cal.fingerprint, "cached": cal.cached, "quick": cal.quick,
                "measured_at": cal.measured_at}
    return _logged("measure_peak", workspace, {}, body)


def accept_candidate(workspace: str | Path | Workspace, source: str) -> dict[str, Any]:
    """Pair the candidate against best.py; install it as best.py when accepted.

    With no best.py yet the candidate is accepted when it passes every stage (see the
    module docstring). Every decision is kept under ``records/`` (evaluation folder,
    trajectory line; best.py replaced atomically), rejections too.
    """
    def body(ws: Workspace) -> dict[str, Any]:
        rec = ws.records
        best = rec.best_source()
        # The records keep this report as the decision's: it holds only the candidate and
        # best.py (the reference's time comes from bench_kernel's pairs or a run of its own).
        report = _evaluate(ws, source, ("compile", "correctness", "benchmark"), ("tune", "hidden"),
                           current=best, accept=True)
        infra = report.infrastructure_failed()
        acc = report.acceptance
        if best is None or (ws.config.server is not None and acc is None):  # no best there
            accepted = _passed(report)
        else:
            accepted = bool(acc is not None and acc.accepted and report.ok)
        folder = rec.new_evaluation(ws.task_dir, source, best)
        # An infrastructure fault is no decision about the candidate: no trajectory line.
        entry = rec.finish(folder, report, None if infra else accepted)
        remember_records_folder(folder, report, entry.accepted if entry else None, origin="tool")
        public = _public(ws, report)
        if accepted:  # read back into later results: the candidate's copy's median
            speed.record_best_time(ws, source, public)
        acc = public.acceptance if best is not None else None
        out = {**base("accept_candidate", public), **timing_fields(public)}
        out.update(ok=accepted, accepted=accepted, baseline="none" if best is None else "best",
                   improvementFraction=acc.improvement_fraction if acc else None,
                   positive_fraction=acc.positive_fraction if acc else None,
                   pairs=acc.pairs if acc else 0, rule=acc.rule if acc else None,
                   replicate_speedup=acc.replicate_speedup if acc else None,
                   reason=acc.reason if acc else _accept_reason(best, public, accepted),
                   verdict=acceptance_verdict(acc, "best.py").text if acc else None,
                   evaluation=str(folder), best_path=str(rec.best_path))
        if acc is None:
            out["unmeasured"]["improvementFraction"] = (
                "no best.py yet: nothing to pair with" if best is None
                else not_reached(public, "accept"))
        else:
            out["unmeasured"].update(
                {("improvementFraction" if k == "improvement_fraction" else k): v
                 for k, v in acc.unmeasured.items()})
        speed.accept_figures(ws, out, public, first=best is None)
        return out
    return _logged("accept_candidate", workspace, {"source": source}, body)


def search_experience(workspace: str | Path | Workspace, **args: Any) -> dict[str, Any]:
    """Past attempts from the experience store, best first, each with a one-line lesson.

    Read-only: it does not take the workspace lock (a search need not wait for a timing
    run), but the call is logged like every other tool call.
    """
    ws = _ws(workspace)
    try:
        check_args("search_experience", args)  # a bad value: a typed bad_argument result
        result = search_for_task(ws.spec, ws.config.backend, ws.config.device, args)
    except KgraderError as e:
        result = fault("search_experience", e)
    ws.records.log_tool_call("search_experience", args, result)
    return result


def _accept_reason(best: str | None, report: Report, accepted: bool) -> str:
    if accepted and best is None:
        return "first correct candidate: it becomes best.py (no best to pair with)"
    return not_reached(report, "accept")


# --- dispatch ---------------------------------------------------------------------------

_FUNCS: dict[str, Callable[..., dict[str, Any]]] = {
    "compile_kernel": compile_kernel, "bench_kernel": bench_kernel, "profile_kernel": profile_kernel,
    "measure_peak": measure_peak, "accept_candidate": accept_candidate,
    "search_experience": search_experience, "describe_task": describe_task,
}


def call_tool(workspace: str | Path | Workspace, name: str, args: Any) -> dict[str, Any]:
    """Run tool ``name`` with JSON ``args`` (validated first; :class:`UsageError` if wrong)."""
    clean = check_args(name, args)
    return _FUNCS[name](workspace, **clean)
