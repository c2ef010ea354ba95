"""The pipeline: scan -> stage -> launch -> collect -> report.

The host never imports candidate code, torch or triton. It takes an in-memory
:class:`EvalRequest`, scans the source, writes the judge's :class:`sandbox.contract.wire.JudgeRequest`
as a secret file, runs the judge under a backend, and turns the authenticated
:class:`sandbox.contract.wire.Record` into a :class:`grader.report.model.Report`.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field

from grader import __version__
from grader.backends.base import SandboxBackend, SandboxOutcome, SandboxSpec
from grader.backends.cleanup import mark_kept, mark_owner
from grader.backends.gate import MeasureGate, Turn, make_fifo
from grader.backends.select import detect_device, select_backend
from grader.backends.stop import ensure_running
from grader.diagnostics.locate import sanitize_request
from grader.errors import InfrastructureError, UsageError
from grader.limits import Limits
from grader.report.model import CandidateInfo, Report, ReportError, SandboxInfo
from grader.report.record import ResultProblem, read_result
from grader.report.summary import build_report, no_record_error
from grader.scan import load_policy, read_candidate, scan_source
from grader.scan.policy import Policy
from grader.shapes import draw_shapes
from grader.task import TaskSpec, load_task
from sandbox.contract import wire

log = structlog.get_logger("kgrader.evaluate")
StageName = Literal["compile", "correctness", "benchmark"]
DeviceName = Literal["auto", "cpu", "cuda", "rocm"]
JUDGE_ARGV = ("python3", "-m", "sandbox.launcher.launch")  # the launcher execs the judge


class Source(BaseModel):
    """A module's text and the name it is reported under (a path, or a label)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    text: str

    @classmethod
    def read(cls, path: str | Path) -> Source:
        return cls(name=str(path), text=read_candidate(Path(path)))

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
            "current": Source.read(current) if current is not None else None,
            "limits": limits, **rest})

    def effective_limits(self) -> Limits:
        return self.limits if self.limits is not None else self.task.limits


@dataclass
class Staged:
    root: Path
    in_dir: Path
    out_dir: Path
    key: bytes


def make_eval_dirs(parent: Path | None, prefix: str) -> tuple[Path, Path, Path]:
    """A private evaluation folder: ``in/`` (sources, sealed by :func:`seal_inputs`) and
    ``out/`` (0700). The root keeps ``mkdtemp``'s 0700 for its whole life: the backends
    bind ``in/`` and ``out/`` themselves, so no sandbox uid resolves a path through it, and
    what a SIGKILL leaves is its owner's alone."""
    ensure_running()  # a process told to stop starts no new sandbox (grader.backends.stop)
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    mark_owner(root)  # lets the next kgrader process reclaim it if this one is killed
    in_dir, out_dir = root / "in", root / "out"
    in_dir.mkdir(mode=0o755)
    out_dir.mkdir(mode=0o700)
    return root, in_dir, out_dir


def seal_inputs(in_dir: Path) -> None:
    """Make ``in/`` and every source in it the judge's alone: 0400 files in a 0700 folder,
    owned by the judge's uid. A runner can then open no side's source, not even list them;
    the judge copies each runner's own module into that runner's private folder
    (``sandbox.launcher.identity.install_module``), and refuses a source others could read. The
    docker backend binds ``in/`` unchanged, so the uid is the same number inside.

    Raises :class:`InfrastructureError` where the host cannot give the files away (not
    root, or a file system refusing chown): a world-readable source would let the
    candidate read the current best's, which on a leaderboard is someone else's kernel.
    """
    if os.geteuid() != 0:
        raise InfrastructureError(
            "kgrader must run as root to stage sources for the judge's uid "
            f"{wire.JUDGE_UID} alone: otherwise every runner could read every side's source")
    try:
        for p in in_dir.iterdir():
            os.chown(p, wire.JUDGE_UID, wire.JUDGE_GID, follow_symlinks=False)
            p.chmod(0o400)
        os.chown(in_dir, wire.JUDGE_UID, wire.JUDGE_GID, follow_symlinks=False)
        in_dir.chmod(0o700)
    except OSError as e:
        raise InfrastructureError(f"cannot stage the sources in {in_dir} for the judge's uid "
                                  f"{wire.JUDGE_UID} alone: {e}") from None


def write_secret(out_dir: Path, request: wire.JudgeRequest) -> None:
    """The judge's request file: created exclusively, never through a link, owned by the
    judge's uid so it can read and delete it before any runner starts."""
    sp = out_dir / wire.SECRET_NAME
    fd = os.open(sp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(wire.dumps(request))
    if os.geteuid() == 0:
        os.chown(sp, wire.JUDGE_UID, wire.JUDGE_GID)
        os.chown(out_dir, wire.JUDGE_UID, wire.JUDGE_GID)


def limits_wire(limits: Limits) -> wire.LimitsWire:
    return wire.LimitsWire(compile_s=limits.compile_s, run_s=limits.run_s,
                           gpu_memory_mib=limits.gpu_memory_mib, memory_mib=limits.memory_mib)


def stage_files(req: EvalRequest, device: wire.Device, floor_ms: float | None) -> Staged:
    """Write the sandbox's view: ``in/`` (ro sources) and ``out/`` (secret, then result)."""
    root, in_dir, out_dir = make_eval_dirs(req.work_dir, "kgrader-eval-")
    try:
        (in_dir / wire.CANDIDATE_NAME).write_text(req.candidate.text, encoding="utf-8")
        if req.current is not None:
            (in_dir / wire.CURRENT_NAME).write_text(req.current.text, encoding="utf-8")
        seal_inputs(in_dir)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    key = secrets.token_bytes(32)
    write_secret(out_dir, wire.JudgeRequest(
        wire_version=wire.WIRE_VERSION, key=key.hex(), mode="evaluate", device=device,
        limits=limits_wire(req.effective_limits()), phase_seed=secrets.randbits(62),
        task=req.task.to_wire(audit_ops=kernel_only(req.task)), reference=req.reference,
        candidate=f"{wire.IN_MOUNT}/{wire.CANDIDATE_NAME}",
        current=f"{wire.IN_MOUNT}/{wire.CURRENT_NAME}" if req.current is not None else None,
        stages=req.stages, shape_kinds=req.shape_kinds, floor_ms=floor_ms,
        trusted_candidate=req.candidate_trusted,
        trusted_current=req.current is not None and req.current_trusted,
        sanitize=sanitize_request(req.sanitize, req.task.sanitize), gated=req.gate is not None))
    if req.gate is not None:
        make_fifo(out_dir)
    return Staged(root, in_dir, out_dir, key)


KERNEL_ONLY_POLICIES = frozenset({"triton-only"})


def kernel_only(task: TaskSpec) -> bool:
    """Whether the task itself (not the policy a run scans with) asks for kernel-only
    candidates: its own policy is, or extends, a kernel-only policy. The runtime audit
    follows the task, so it holds with the scan switched off."""
    try:
        chain = load_policy(task.policy).chain
    except UsageError:
        return True  # fail closed: an unknown policy gets the strictest runtime audit
    return bool(KERNEL_ONLY_POLICIES & set(chain))


def _resolve_device(device: str) -> wire.Device:
    dev = detect_device() if device == "auto" else device
    if dev not in ("cpu", "cuda", "rocm"):
        raise UsageError(f"unknown device {device!r} (auto, cpu, cuda, rocm)")
    return dev  # type: ignore[return-value]


def evaluate(req: EvalRequest) -> Report:
    """Run one evaluation. Raises :class:`UsageError` / :class:`InfrastructureError` only."""
    spec, limits = req.task, req.effective_limits()
    spec = spec.model_copy(update={"limits": limits})
    report = Report(ok=False, stage="scan", task=spec.name, candidate=req.candidate.info(),
                    current=req.current.info() if req.current is not None else None,
                    kgrader_version=__version__)
    spec, report.shapes = draw_shapes(spec, req.shape_seed)  # generated tasks (grader.shapes)
    policy = req.policy if isinstance(req.policy, Policy) else load_policy(req.policy or spec.policy)
    t_scan = time.monotonic()
    scan = scan_source(req.candidate.text, policy, filename=req.candidate.name)
    scan_s = time.monotonic() - t_scan
    report.scan = scan.summary()
    denied = [f for f in scan.findings if f.severity == "deny"]
    if denied:
        report.errors = [ReportError(stage="scan", code=f.rule, message=f.message, line=f.line,
                                     col=f.col, origin="candidate", detail={"snippet": f.snippet})
                         for f in denied]
        return report
    report.warnings += [f"scan: {f.rule} at line {f.line}: {f.message}" for f in scan.findings]
    if req.current is not None and not req.current_trusted:
        cur_scan = scan_source(req.current.text, policy, filename=req.current.name)
        if cur_scan.denied:
            raise UsageError(f"the current best {req.current.name} is denied by policy "
                             f"{policy.name}: "
                             f"{[f.rule for f in cur_scan.findings if f.severity == 'deny']}")
    device = _resolve_device(req.device)
    backend = select_backend(req.backend, device)
    report.stage = "sandbox"
    report.device = device
    from grader.measure.floors import floor_ms

    floor = spec.roofline_floor_ms if spec.roofline_floor_ms is not None else \
        floor_ms(spec, device, req.peaks)
    staged = stage_files(req.model_copy(update={"task": spec}), device, floor)
    try:
        launched = time.time()
        outcome = backend.run(SandboxSpec(in_dir=staged.in_dir, out_dir=staged.out_dir,
                                          argv=JUDGE_ARGV, limits=limits, device=device,
                                          gpu_ids=req.gpu_ids, label=uuid.uuid4().hex[:12],
                                          gate=None if req.gate is None else
                                          Turn(req.gate, staged.out_dir / wire.GATE_NAME)))
        report = collect(report, spec, backend, outcome, staged, limits)
        if report.sandbox is not None:
            report.sandbox.phases = _phases(report.sandbox.phases, launched, time.time(),
                                            scan_s)
        return report
    finally:
        if not req.keep:
            shutil.rmtree(staged.root, ignore_errors=True)
        else:
            mark_kept(staged.root)  # kept on purpose: cleanup leaves it


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
        record = read_result(staged.out_dir / wire.RESULT_NAME, staged.key, limits.result_bytes)
        report.sandbox.phases = {**record.phases,
                                 "_judge_started": record.judge_started or 0.0,
                                 "_judge_finished": record.judge_finished or 0.0}
    except ResultProblem as p:
        report.errors.append(no_record_error(p, outcome))
        report.stage = report.errors[-1].stage
        log.warning("result_rejected", code=report.errors[-1].code)
        return report
    return build_report(report, spec, record, outcome)


def _phases(judge: dict[str, float], launched: float, ended: float, scan_s: float) -> dict[str, float]:
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


def run_judge_mode(request: wire.JudgeRequest, files: dict[str, str], *, backend: str = "auto",
                   limits: Limits | None = None, gpu_ids: tuple[str, ...] = ()) -> wire.Record:
    """Run the judge in a special mode (``measure_peak``, ``calibrate``) and verify its record.

    ``request`` carries no key yet (a fresh one is made here); ``files`` land in ``/kg/in``,
    the judge's alone (:func:`seal_inputs`). Raises :class:`InfrastructureError` when the
    sandbox produces no verified record.
    """
    lim = limits or Limits(compile_s=60, run_s=600, memory_mib=8192)
    be = select_backend(backend, request.device)
    root, in_dir, out_dir = make_eval_dirs(None, "kgrader-mode-")
    try:
        for name, src in files.items():
            (in_dir / name).write_text(src, encoding="utf-8")
        seal_inputs(in_dir)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    key = secrets.token_bytes(32)
    write_secret(out_dir, wire.JudgeRequest(**{**request.__dict__, "key": key.hex(),
                                               "limits": limits_wire(lim)}))
    try:
        outcome = be.run(SandboxSpec(in_dir=in_dir, out_dir=out_dir, argv=JUDGE_ARGV, limits=lim,
                                     device=request.device, gpu_ids=gpu_ids,
                                     label=uuid.uuid4().hex[:12]))
        try:
            return read_result(out_dir / wire.RESULT_NAME, key, lim.result_bytes)
        except ResultProblem as p:
            raise InfrastructureError(f"judge mode {request.mode} produced no verified result "
                                      f"({p.code}); stderr: "
                                      f"{outcome.stderr[-800:].decode('utf-8', 'replace')}") from None
    finally:
        shutil.rmtree(root, ignore_errors=True)


def mode_request(mode: wire.Mode, device: str, **fields: object) -> wire.JudgeRequest:
    """A keyless request for :func:`run_judge_mode` (the key and limits are filled there)."""
    return wire.JudgeRequest(wire_version=wire.WIRE_VERSION, key="", mode=mode,
                             device=_resolve_device(device),
                             limits=wire.LimitsWire(compile_s=60, run_s=600, gpu_memory_mib=None),
                             phase_seed=secrets.randbits(62), **fields)  # type: ignore[arg-type]


def measure_peak(backend: str = "auto", device: str = "auto", quick: bool = False,
                 limits: Limits | None = None) -> wire.Record:
    """Run the judge in calibration mode: the device's copy bandwidth and matmul peaks.

    Returns the verified record (``peaks`` and ``environment``); raises
    :class:`InfrastructureError` when the sandbox cannot produce one.
    """
    record = run_judge_mode(mode_request("measure_peak", device, quick=quick), {},
                            backend=backend, limits=limits)
    if record.errors or record.peaks is None:
        msg = record.errors[0].message if record.errors else "no peaks"
        raise InfrastructureError(f"calibration failed: {msg}")
    return record
