"""Running the ``profile`` judge mode and turning judge records into :class:`Diagnostics`.

``profile()`` is a separate sandbox run (never mixed with timing): scan the candidate, then
run the judge in mode ``profile`` under the task's limits; the judge opens one runner
wrapped by Nsight Compute, launches the candidate on judge-made inputs at the first tune
shape (warm-up calls unprofiled), and records the counters. The host reads them, attaches
a launch-level roofline where peaks are known, and distils advice.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grader.diagnostics.advice import AdviceTable, advise, load_table
from grader.diagnostics.locate import tool_hint
from grader.diagnostics.models import (
    Diagnostics,
    KernelDiagnostics,
    SanitizerFinding,
    SanitizerResult,
)
from grader.diagnostics.ncu import METRICS, counters, group_launches
from grader.report.model import Report, ReportError
from grader.task import TaskSpec
from sandbox.contract import wire

WARMUP_CALLS = 2
PROFILED_CALLS = 2
MAX_KERNELS = 64
NOT_RUN = "not measured: the profile did not run"
NO_GPU = ("not measured: the device is the CPU; hardware counters come from Nsight Compute on "
          "an NVIDIA GPU")


class ProfileResult(BaseModel):
    """What ``kgrader profile`` prints: the candidate's stage result plus diagnostics."""

    model_config = ConfigDict(extra="forbid")

    ok: bool = Field(description="The candidate built and ran; counters may still be null.")
    stage: str | None
    errors: list[ReportError] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    task: str
    device: str
    backend: str | None = None
    diagnostics: Diagnostics


@dataclass
class ProfileRequest:
    task_dir: Path
    candidate: Path
    backend: str = "auto"
    device: str = "auto"
    policy: str | None = None
    limits: dict[str, float | int | None] = field(default_factory=dict)
    peaks: Mapping[str, Any] | None = None  # None: the calibration cache, if it has an entry
    roofline_fraction: float | None = None  # from a verified benchmark (the agent tool)
    bound: Literal["memory", "compute"] | None = None
    gpu_ids: tuple[str, ...] = ()  # the GPUs the sandbox sees (default: the backend's rule)


def profile_request(spec: TaskSpec, reference: str, device: str) -> wire.JudgeRequest:
    """The judge's (keyless) request for mode ``profile``; the candidate lands in ``/kg/in``.

    Only the tune shapes travel: the profile launches the first one, and the hidden shapes
    stay with the host.
    """
    from grader.evaluate import kernel_only, mode_request

    task = dataclasses.replace(spec.to_wire(audit_ops=kernel_only(spec)), hidden=())
    ncu = tool_hint("ncu") if device == "cuda" else None
    return mode_request("profile", device, task=task, reference=reference,
                        candidate=f"{wire.IN_MOUNT}/{wire.CANDIDATE_NAME}", stages=("compile",),
                        shape_kinds=("tune",),
                        profile=wire.ProfileWire(metrics=METRICS, ncu=ncu, warmup_calls=WARMUP_CALLS,
                                                 profiled_calls=PROFILED_CALLS,
                                                 max_kernels=MAX_KERNELS))


def profile(req: ProfileRequest) -> ProfileResult:
    """Scan, then profile the candidate in its own sandbox run. Raises only UsageError /
    InfrastructureError; the candidate's faults are values in the result."""
    from grader.backends.select import detect_device
    from grader.evaluate import run_judge_mode
    from grader.scan import load_policy, read_candidate, scan_source
    from grader.task import load_task

    spec, reference = load_task(req.task_dir)
    limits = spec.limits.override(**req.limits) if req.limits else spec.limits
    src = read_candidate(req.candidate)
    device = detect_device() if req.device == "auto" else req.device
    policy = load_policy(req.policy or spec.policy)
    scan = scan_source(src, policy, filename=str(req.candidate))
    denied = [f for f in scan.findings if f.severity == "deny"]
    if denied:
        return ProfileResult(
            ok=False, stage="scan", task=spec.name, device=device,
            errors=[ReportError(stage="scan", code=f.rule, message=f.message, line=f.line,
                                col=f.col, origin="candidate") for f in denied],
            diagnostics=Diagnostics(unmeasured={"kernels": "not measured: the scan denied the candidate"}))
    t0 = time.monotonic()
    rec = run_judge_mode(profile_request(spec, reference, device), {wire.CANDIDATE_NAME: src},
                         backend=req.backend, limits=limits, gpu_ids=req.gpu_ids)
    wall = time.monotonic() - t0
    peaks = req.peaks if req.peaks is not None else cached_peaks(req.backend, device)
    diag = build_diagnostics(rec.diagnostics, spec=spec, peaks=peaks,
                             roofline_fraction=req.roofline_fraction, bound=req.bound)
    diag.profile_overhead_s = round(wall, 3)
    errors = [ReportError(stage=e.stage, code=e.code, origin=e.origin, message=e.message,
                          line=e.line, detail=dict(e.detail)) for e in rec.errors]
    return ProfileResult(ok=not errors, stage=rec.stage, errors=errors,
                         warnings=[*rec.warnings, *(f"scan: {f.rule} at line {f.line}: {f.message}"
                                                   for f in scan.findings)],
                         task=spec.name, device=device, diagnostics=diag)


def cached_peaks(backend: str, device: str) -> dict[str, Any] | None:
    """Calibrated peaks from the cache only (never starts a calibration), or ``None``."""
    from grader.errors import KgraderError
    from grader.measure.peaks import host_probe, load_entries, probe_key, resolve_target

    try:
        be, dev = resolve_target(backend, device)
        key = probe_key(host_probe(be, dev))
        hits = [e for e in load_entries() if e.probe_key == key]
    except (KgraderError, OSError, ValueError):
        return None
    return dict(hits[-1].peaks) if hits else None


def _launch_roofline(spec: TaskSpec | None, prof: wire.ProfileRecord, kernels: list[KernelDiagnostics],
                     peaks: Mapping[str, Any] | None) -> tuple[float | None, str | None, str | None]:
    """(fraction, bound, why-not) of one call: cost model over the summed kernel times."""
    from grader.measure.profile import counters_roofline

    if spec is None or spec.cost_model is None:
        return None, None, "the task has no cost model"
    per_call = [k.counters.duration_ms for k in kernels]
    if not per_call or any(d is None for d in per_call):
        return None, None, "no kernel duration was measured"
    point, why = counters_roofline(spec, prof.dims or spec.shapes.tune[0],
                                   sum(d for d in per_call if d is not None), peaks)
    if point is None:
        return None, None, why
    return point.roofline_fraction, point.bound, None


def build_diagnostics(raw: wire.DiagnosticsRecord | None, *, spec: TaskSpec | None = None,
                      peaks: Mapping[str, Any] | None = None, roofline_fraction: float | None = None,
                      bound: str | None = None, table: AdviceTable | None = None) -> Diagnostics:
    """Counters per kernel, advice, overheads and the sanitizer result from a judge record.

    ``roofline_fraction``/``bound`` from a verified benchmark win over the profile's own
    (ncu-timed) roofline; without either, a kernel's bound is read from its counters.
    """
    d = Diagnostics()
    raw = raw or wire.DiagnosticsRecord()
    if raw.sanitizer is not None:
        d.sanitizer = sanitizer_result(raw.sanitizer)
    prof = raw.profile
    if prof is None:
        d.unmeasured["kernels"] = NOT_RUN
        return d
    d.tool = " ".join(x for x in ("ncu", prof.version) if x)
    d.dims, d.profiled_calls = dict(prof.dims), prof.calls
    if prof.truncated:
        d.notes.append("ncu's log exceeded its size cap; later kernels are missing")
    if prof.dropped:
        d.notes.append(f"{prof.dropped} counter value(s) were not numbers and were dropped")
    if prof.unmeasured or not prof.kernels:
        d.unmeasured["kernels"] = prof.unmeasured or "not measured: ncu reported no kernel"
        return d
    d.kernels = [KernelDiagnostics(name=name, launches=len(rows), block=rows[0].block,
                                   grid=rows[0].grid, counters=counters(rows))
                 for name, rows in group_launches(prof.kernels, prof.calls)]
    if roofline_fraction is None:
        roofline_fraction, bound, why = _launch_roofline(spec, prof, d.kernels, peaks)
        if why:
            d.unmeasured["roofline_fraction"] = f"not measured: {why}"
    d.roofline_fraction = roofline_fraction
    d.bound = bound if bound in ("memory", "compute") else None  # type: ignore[assignment]
    if d.bound is None:
        d.notes.append("bound read per kernel from its counters (DRAM vs SM throughput): "
                       "no roofline for this launch")
    tab = table or load_table()
    for k in d.kernels:
        c = k.counters
        kb = d.bound or _counter_bound(c.dram_throughput_pct, c.sm_throughput_pct)
        k.advice = advise(c, tab, roofline_fraction=d.roofline_fraction if d.bound else None, bound=kb)
        d.advice += [f"{k.name}: {s}" for s in k.advice]
    return d


def _counter_bound(dram: float | None, sm: float | None) -> str | None:
    if dram is None or sm is None:
        return None
    return "memory" if dram >= sm else "compute"


def record_problem(raw: wire.DiagnosticsRecord) -> str | None:
    """Why an authenticated record's diagnostics break their caps (the judge's parsers keep
    to them; a record that does not is refused whole, as for every other cap), or ``None``."""
    p, s = raw.profile, raw.sanitizer
    if p is not None and (len(p.kernels) > 256 or len(p.messages) > 40 or any(
            len(k.name) > 300 or len(k.metrics) > 200 for k in p.kernels)):
        return "diagnostics.profile exceeds its caps (256 kernels, 40 messages)"
    if s is not None:
        if len(s.findings) > 20 or len(s.tool_errors) > 5:
            return "diagnostics.sanitizer exceeds its caps (20 findings, 5 tool errors)"
        try:
            sanitizer_result(s)
        except ValidationError as e:
            return f"diagnostics.sanitizer has {e.error_count()} invalid field(s)"
    return None


def sanitizer_result(raw: wire.SanitizerRecord) -> SanitizerResult:
    return SanitizerResult(tool=raw.tool, ran=raw.ran, overhead_s=raw.wall_s,
                           error_count=raw.error_count,
                           findings=[SanitizerFinding.model_validate(dataclasses.asdict(f))
                                     for f in raw.findings],
                           unmeasured=raw.unmeasured)


def diagnose(task_dir: Path, source: str, report: Report, prof: Any, *, backend: str = "auto",
             policy: str | None = None, peaks: Mapping[str, Any] | None = None) -> Diagnostics:
    """Counters and advice for a kernel that was just benchmarked (the agent's profile tool).

    Only a kernel that reached the benchmark stage is profiled, in a separate sandbox run;
    on the CPU there are no counters, so no sandbox starts and the reason is recorded.
    ``prof`` (a :class:`grader.measure.profile.Profile`) supplies the verified roofline.
    """
    if report.timing is None:
        first = report.errors[0] if report.errors else None
        why = f"{first.stage} failed ({first.code})" if first else "it was not benchmarked"
        return Diagnostics(unmeasured={"kernels": f"not profiled: {why}"})
    if report.device is None or report.device.split(":")[0] != "cuda":
        return Diagnostics(unmeasured={"kernels": NO_GPU})
    from grader.errors import KgraderError

    with tempfile.TemporaryDirectory(prefix="kgrader-profile-") as tmp:
        cand = Path(tmp) / "candidate.py"
        cand.write_text(source, encoding="utf-8")
        try:
            result = profile(ProfileRequest(task_dir=task_dir, candidate=cand, backend=backend,
                                            device="cuda", policy=policy, peaks=peaks or {},
                                            roofline_fraction=prof.roofline_fraction, bound=prof.bound))
        except KgraderError as e:  # the profile is advice: its failure never fails the tool
            return Diagnostics(unmeasured={"kernels": f"not measured: the profile run failed: {e}"})
    diag = result.diagnostics
    if result.errors:  # benchmarked fine, failed under the profiler: say so, guess nothing
        first = result.errors[0]
        diag.unmeasured.setdefault("kernels", f"not measured: the profile run failed "
                                              f"({first.stage}: {first.code})")
    return diag
