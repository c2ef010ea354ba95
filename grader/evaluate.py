"""The pipeline: scan -> stage -> launch -> collect -> report.

The host never imports candidate code, torch or triton. It takes an in-memory
:class:`EvalRequest`, scans the source, writes the judge's :class:`sandbox.contract.wire.JudgeRequest`
as a secret file, runs the judge under a backend, and turns the authenticated
:class:`sandbox.contract.wire.Record` into a :class:`grader.report.model.Report`.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from grader import __version__
from grader import builds as build_cache
from grader.backends.base import SandboxBackend, SandboxOutcome
from grader.backends.cleanup import free_bytes
from grader.backends.gate import MeasureGate
from grader.backends.select import select_backend
from grader.diagnostics.locate import sanitize_request
from grader.errors import UsageError
from grader.grading.summary import build_report, no_record_error
from grader.judgecall import Staged, judge_run, limits_wire, read_record, resolve_device
from grader.limits import Limits
from grader.logs import get_logger
from grader.measure.floors import floor_ms
from grader.report.model import CandidateInfo, Report, ReportError, SandboxInfo
from grader.report.record import ResultProblem
from grader.scan import load_policy, read_candidate, scan_source
from grader.scan.policy import Policy, kernel_only
from grader.shapes import draw_shapes
from grader.task import TaskSpec, load_task
from sandbox.contract import wire

log = get_logger("kgrader.evaluate")
StageName = Literal["compile", "correctness", "benchmark"]
DeviceName = Literal["auto", "cpu", "cuda", "rocm"]


class Source(BaseModel):
    """A module's text and the name it is reported under (a path, or a label)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    text: str

    @classmethod
    def read(cls, path: str | Path, what: str = "candidate") -> Source:
        return cls(name=str(path), text=read_candidate(Path(path), what=what))

    def info(self) -> CandidateInfo:
        raw = self.text.encode()
        return CandidateInfo(path=self.name, sha256=hashlib.sha256(raw).hexdigest(), bytes=len(raw))


class EvalRequest(BaseModel):
    """One evaluation, entirely in memory: nothing is read back from files."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    task: TaskSpec
    reference: str
    candidate: Source
    current: Source | None = None
    current_trusted: bool = Field(False, description="The current is trusted (a task's reference).")
    candidate_trusted: bool = Field(
        False, description="The candidate is trusted task code (a leaderboard's reference check).")
    policy: Policy | str | None = Field(None, description="None: the task's policy.")
    limits: Limits | None = Field(None, description="None: the task's limits.")
    backend: str = "auto"
    device: DeviceName = "auto"
    gpu_ids: tuple[str, ...] = ()
    stages: tuple[StageName, ...] = ("compile", "correctness", "benchmark")
    shape_kinds: tuple[wire.ShapeKind, ...] = ("tune", "hidden")
    work_dir: Path | None = None
    keep: bool = False
    peaks: dict[str, float] | None = None
    sanitize: Literal["memcheck", "racecheck", "none", "default"] | None = Field(
        None, description="compute-sanitizer for the correctness stage; 'default': the task's "
                          "tool or else memcheck; None: the task's `sanitize`.")
    shape_seed: int | None = Field(None, description="Seed of a generated task's shape draw (a "
                                   "leaderboard secret); None: a fresh secret per evaluation.")
    build_cache: bool = Field(True, description="Load and keep each source's builds "
                              "(grader.builds); off for a replay, where a source's kept files "
                              "could hold answers to the very seeds it is graded on again.")
    cancel: threading.Event | None = Field(None, description="Set to stop the evaluation: "
                                           "its sandbox is killed (a cancelled service job).")
    gate: MeasureGate | None = Field(None, description="The device's measurement gate: the "
                                     "sandbox prepares, then waits for its turn before it "
                                     "touches the device (grader.backends.gate).")

    @classmethod
    def from_paths(cls, task_dir: str | Path, candidate: str | Path, current: str | Path | None = None,
                   *, limits: dict[str, float | int | None] | Limits | None = None,
                   **rest: object) -> EvalRequest:
        """Read the task folder and the sources (the CLI's way in); ``limits`` may be
        overrides of the task's limits."""
        spec, reference = load_task(task_dir)
        if isinstance(limits, dict):
            limits = spec.limits.override(**limits)
        return cls.model_validate({
            "task": spec, "reference": reference, "candidate": Source.read(candidate),
            "current": Source.read(current, "current") if current is not None else None,
            "limits": limits, **rest})

    def effective_limits(self) -> Limits:
        return self.limits if self.limits is not None else self.task.limits


def sources(req: EvalRequest) -> dict[str, str]:
    """The files the judge reads from ``/kg/in``: the candidate, and the current if any."""
    files = {wire.CANDIDATE_NAME: req.candidate.text}
    if req.current is not None:
        files[wire.CURRENT_NAME] = req.current.text
    return files


def judge_request(req: EvalRequest, device: wire.Device, floor: float | None) -> wire.JudgeRequest:
    """The judge's (keyless) ``evaluate`` request; :mod:`grader.judgecall` adds the key."""
    return wire.JudgeRequest(
        wire_version=wire.WIRE_VERSION, key="", mode="evaluate", device=device,
        limits=limits_wire(req.effective_limits()), phase_seed=secrets.randbits(62),
        task=req.task.to_wire(audit_ops=kernel_only(req.task.policy)), reference=req.reference,
        candidate=f"{wire.IN_MOUNT}/{wire.CANDIDATE_NAME}",
        current=f"{wire.IN_MOUNT}/{wire.CURRENT_NAME}" if req.current is not None else None,
        stages=req.stages, shape_kinds=req.shape_kinds, floor_ms=floor,
        trusted_candidate=req.candidate_trusted,
        trusted_current=req.current is not None and req.current_trusted,
        sanitize=sanitize_request(req.sanitize, req.task.sanitize), gated=req.gate is not None,
        builds=req.build_cache and build_cache.cache_root() is not None)


def screen(req: EvalRequest, spec: TaskSpec) -> tuple[Report, float]:
    """The host's part before any sandbox: the report's frame and the static scan of the
    candidate (and of an untrusted current best), with the scan's seconds. A denied
    candidate's report holds the denials in ``errors`` (no sandbox may run then); a denied
    current best raises :class:`UsageError`."""
    report = Report(ok=False, stage="scan", task=spec.name, candidate=req.candidate.info(),
                    current=req.current.info() if req.current is not None else None,
                    kgrader_version=__version__)
    policy = req.policy if isinstance(req.policy, Policy) else load_policy(req.policy or spec.policy)
    t_scan = time.monotonic()
    scan = scan_source(req.candidate.text, policy, filename=req.candidate.name)
    scan_s = time.monotonic() - t_scan
    report.scan = scan.summary()
    denied = [f for f in scan.findings if f.severity == "deny"]
    if denied:
        report.errors = [ReportError(stage="scan", code=f.rule, message=f.message, line=f.line,
                                     col=f.col, origin="candidate",
                                     detail={"snippet": f.snippet, "threat": f.threat})
                         for f in denied]
        return report, scan_s
    report.warnings += [f"scan: {f.rule} at line {f.line}: {f.message} (threat: {f.threat})"
                        for f in scan.findings]
    if req.current is not None and not req.current_trusted:
        cur_scan = scan_source(req.current.text, policy, filename=req.current.name)
        if cur_scan.denied:
            raise UsageError(f"the current best {req.current.name} is denied by policy "
                             f"{policy.name}: "
                             f"{[f.rule for f in cur_scan.findings if f.severity == 'deny']}")
    return report, scan_s


def evaluate(req: EvalRequest) -> Report:
    """Run one evaluation. Raises :class:`UsageError` / :class:`InfrastructureError` only."""
    spec, limits = req.task, req.effective_limits()
    spec = spec.model_copy(update={"limits": limits})
    spec, shapes = draw_shapes(spec, req.shape_seed)  # generated tasks (grader.shapes)
    report, scan_s = screen(req, spec)
    report.shapes = shapes
    if report.errors:
        return report
    device = resolve_device(req.device)
    backend = select_backend(req.backend, device)
    report.stage = "sandbox"
    report.device = device
    floor = spec.roofline_floor_ms if spec.roofline_floor_ms is not None else \
        floor_ms(spec, device, req.peaks)
    staged_req = req.model_copy(update={"task": spec})
    with judge_run(judge_request(staged_req, device, floor), sources(staged_req), backend, limits,
                   gpu_ids=req.gpu_ids, gate=req.gate, work_dir=req.work_dir,
                   keep=req.keep, cancel=req.cancel) as run:
        report = collect(report, spec, backend, run.outcome, run.staged, limits)
        if report.sandbox is not None:
            report.sandbox.phases = frame_phases(report.sandbox.phases, run.launched,
                                                 time.time(), scan_s)
        return report


def collect(report: Report, spec: TaskSpec, backend: SandboxBackend, outcome: SandboxOutcome,
            staged: Staged, limits: Limits) -> Report:
    report.sandbox = SandboxInfo(
        backend=backend.name, limits=limits, exit_code=outcome.exit_code, signal=outcome.signal,
        timed_out=outcome.timed_out, oom_killed=outcome.oom_killed, limit_fired=outcome.limit_fired,
        wall_s=round(outcome.wall_s, 3), output_truncated=outcome.output_truncated,
        stdout_tail=outcome.stdout[-2000:].decode("utf-8", "replace"),
        stderr_tail=outcome.stderr[-4000:].decode("utf-8", "replace"),
        enforcement=outcome.enforcement)
    try:
        record = read_record(staged, limits)
        report.sandbox.phases = {**record.phases,
                                 "_judge_started": record.judge_started or 0.0,
                                 "_judge_finished": record.judge_finished or 0.0}
    except ResultProblem as p:
        report.errors.append(no_record_error(p, outcome, free_bytes(staged.out_dir)))
        report.stage = report.errors[-1].stage
        log.warning("result_rejected", code=report.errors[-1].code)
        return report
    return build_report(report, spec, record, outcome)


def frame_phases(judge: dict[str, float], launched: float, ended: float,
                 scan_s: float) -> dict[str, float]:
    """The judge's phases framed by the host's clock: set-up before it, teardown after."""
    started, finished = judge.pop("_judge_started", 0.0), judge.pop("_judge_finished", 0.0)
    out = {"scan": round(scan_s, 4)}
    if started and launched <= started <= ended:
        out["sandbox_setup"] = round(started - launched, 4)
    out.update(judge)
    if finished and started <= finished <= ended:
        out["teardown"] = round(ended - finished, 4)
    out["total"] = round(ended - launched, 4)
    return out
