"""Running the ``profile`` judge mode, and the agent's profile of a benchmarked kernel.

``profile()`` is a separate sandbox run (never mixed with timing): scan the candidate, then
run the judge in mode ``profile`` under the task's limits; the judge opens one runner
wrapped by Nsight Compute, launches the candidate on judge-made inputs at the first tune
shape (warm-up calls unprofiled), and records the counters. The host reads them, attaches
a launch-level roofline where peaks are known, and distils advice
(:mod:`grader.diagnostics.records`).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from grader.backends.select import detect_device
from grader.diagnostics.locate import tool_hint
from grader.diagnostics.ncu import METRICS
from grader.diagnostics.records import build_diagnostics
from grader.errors import KgraderError
from grader.judgecall import mode_request, run_judge_mode
from grader.measure.peaks import host_probe, load_entries, probe_key, resolve_target
from grader.report.diagnostics_model import Diagnostics
from grader.report.model import Report, ReportError
from grader.scan import load_policy, read_candidate, scan_source
from grader.scan.policy import kernel_only
from grader.task import TaskSpec, load_task
from sandbox.contract import wire

WARMUP_CALLS = 2
PROFILED_CALLS = 2
MAX_KERNELS = 64
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
    task = dataclasses.replace(spec.to_wire(audit_ops=kernel_only(spec.policy)), hidden=())
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
                          line=e.line, detail=dict(e.detail), after_hidden=e.after_hidden)
              for e in rec.errors]
    return ProfileResult(ok=not errors, stage=rec.stage, errors=errors,
                         warnings=[*rec.warnings, *(f"scan: {f.rule} at line {f.line}: {f.message}"
                                                   for f in scan.findings)],
                         task=spec.name, device=device, diagnostics=diag)


def cached_peaks(backend: str, device: str) -> dict[str, Any] | None:
    """Calibrated peaks from the cache only (never starts a calibration), or ``None``."""
    try:
        be, dev = resolve_target(backend, device)
        key = probe_key(host_probe(be, dev))
        hits = [e for e in load_entries() if e.probe_key == key]
    except (KgraderError, OSError, ValueError):
        return None
    return dict(hits[-1].peaks) if hits else None


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
