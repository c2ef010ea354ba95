"""The pipeline: scan -> stage -> launch -> collect -> report.

The host never imports candidate code, torch or triton. It reads the task, scans the
source, stages files for the sandbox, runs the judge under a backend, and turns the
authenticated result record into a :class:`grader.report.model.Report`.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog

from grader import __version__
from grader.backends.base import (
    IN_MOUNT,
    RESULT_NAME,
    SANDBOX_GID,
    SANDBOX_UID,
    SECRET_NAME,
    Device,
    SandboxBackend,
    SandboxOutcome,
    SandboxSpec,
)
from grader.backends.select import detect_device, select_backend
from grader.diagnostics.locate import sanitize_request
from grader.errors import UsageError
from grader.limits import Limits
from grader.report.model import CandidateInfo, Report, SandboxInfo, StageError
from grader.report.record import JudgePayload, ResultProblem, read_result
from grader.report.summary import build_report
from grader.scan import load_policy, read_candidate, scan_source
from grader.task import TaskSpec, load_task

log = structlog.get_logger("kgrader.evaluate")
StageName = Literal["compile", "correctness", "benchmark"]


@dataclass
class EvalRequest:
    """One evaluation. Only ``task_dir`` and ``candidate`` are required."""

    task_dir: Path
    candidate: Path
    current: Path | None = None
    backend: str = "auto"
    device: str = "auto"
    policy: str | None = None
    limits: dict[str, float | int | None] = field(default_factory=dict)
    stages: tuple[StageName, ...] = ("compile", "correctness", "benchmark")
    shape_kinds: tuple[str, ...] = ("tune", "hidden")
    work_dir: Path | None = None
    keep: bool = False
    gpu_ids: tuple[str, ...] = ()
    peaks: dict[str, float] | None = None
    current_trusted: bool = False  # the current is trusted code (a task's reference): not scanned
    sanitize: str | None = None  # memcheck|racecheck|none|default; None: the task's `sanitize`


@dataclass
class Staged:
    root: Path
    in_dir: Path
    out_dir: Path
    key: bytes


def _info(path: Path, src: str) -> CandidateInfo:
    raw = src.encode()
    return CandidateInfo(path=str(path), sha256=hashlib.sha256(raw).hexdigest(), bytes=len(raw))


def stage_files(req: EvalRequest, spec: TaskSpec, reference: str, cand_src: str,
                cur_src: str | None, device: Device, floor_ms: float | None) -> Staged:
    """Write the sandbox's view: ``in/`` (ro sources) and ``out/`` (secret, then result)."""
    root, in_dir, out_dir = make_eval_dirs(req.work_dir, "kgrader-eval-")
    (in_dir / "candidate.py").write_text(cand_src, encoding="utf-8")
    if cur_src is not None:
        (in_dir / "current.py").write_text(cur_src, encoding="utf-8")
    for p in in_dir.iterdir():
        p.chmod(0o444)
    key = secrets.token_bytes(32)
    secret = {
        "key": key.hex(), "task": spec.model_dump(mode="json"), "reference": reference,
        "candidate": f"{IN_MOUNT}/candidate.py",
        "current": f"{IN_MOUNT}/current.py" if cur_src is not None else None,
        "device": device, "stages": list(req.stages), "shape_kinds": list(req.shape_kinds),
        "phase_seed": secrets.randbits(62), "limits": spec.limits.model_dump(),
        "floor_ms": floor_ms,
        "sanitize": sanitize_request(req.sanitize, spec.sanitize),
    }
    write_secret(out_dir, secret)
    return Staged(root, in_dir, out_dir, key)


def make_eval_dirs(parent: Path | None, prefix: str) -> tuple[Path, Path, Path]:
    """A private evaluation folder: ``in/`` (world-readable sources) and ``out/`` (0700)."""
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    root.chmod(0o755)
    in_dir, out_dir = root / "in", root / "out"
    in_dir.mkdir(mode=0o755)
    out_dir.mkdir(mode=0o700)
    return root, in_dir, out_dir


def write_secret(out_dir: Path, secret: Mapping[str, object]) -> None:
    """The judge's secret file: created exclusively, never through a link, owned by the
    sandbox uid so the judge can read and delete it before any runner starts."""
    sp = out_dir / SECRET_NAME
    fd = os.open(sp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(secret, f)
    if os.geteuid() == 0:
        os.chown(sp, SANDBOX_UID, SANDBOX_GID)
        os.chown(out_dir, SANDBOX_UID, SANDBOX_GID)


def evaluate(req: EvalRequest) -> Report:
    """Run one evaluation. Raises :class:`UsageError` / :class:`InfrastructureError` only."""
    spec, reference = load_task(req.task_dir)
    limits = spec.limits.override(**req.limits) if req.limits else spec.limits
    spec = spec.model_copy(update={"limits": limits})
    cand_src = read_candidate(req.candidate)
    cur_src = read_candidate(req.current) if req.current is not None else None
    report = Report(ok=False, stage="scan", task=spec.name, candidate=_info(req.candidate, cand_src),
                    current=_info(req.current, cur_src) if req.current and cur_src is not None else None,
                    kgrader_version=__version__)
    policy = load_policy(req.policy or spec.policy)
    scan = scan_source(cand_src, policy, filename=str(req.candidate))
    report.scan = scan.summary()
    denied = [f for f in scan.findings if f.severity == "deny"]
    if denied:
        report.errors = [StageError(stage="scan", code=f.rule, message=f.message, line=f.line,
                                    col=f.col, detail={"snippet": f.snippet}) for f in denied]
        return report
    report.warnings += [f"scan: {f.rule} at line {f.line}: {f.message}" for f in scan.findings]
    if cur_src is not None and not req.current_trusted:
        cur_scan = scan_source(cur_src, policy, filename=str(req.current))
        if cur_scan.denied:
            raise UsageError(f"the current best {req.current} is denied by policy {policy.name}: "
                             f"{[f.rule for f in cur_scan.findings if f.severity == 'deny']}")
    device = detect_device() if req.device == "auto" else req.device
    if device not in ("cpu", "cuda", "rocm"):
        raise UsageError(f"unknown device {req.device!r} (auto, cpu, cuda, rocm)")
    backend = select_backend(req.backend, device)  # type: ignore[arg-type]
    report.stage = "sandbox"
    report.device = device
    from grader.measure.floors import floor_ms

    floor = spec.roofline_floor_ms if spec.roofline_floor_ms is not None else \
        floor_ms(spec, device, req.peaks)
    staged = stage_files(req, spec, reference, cand_src, cur_src, device, floor)  # type: ignore[arg-type]
    try:
        outcome = backend.run(SandboxSpec(in_dir=staged.in_dir, out_dir=staged.out_dir,
                                          argv=("python3", "-m", "sandbox.judge"), limits=limits,
                                          device=device, gpu_ids=req.gpu_ids,  # type: ignore[arg-type]
                                          label=uuid.uuid4().hex[:12]))
        return collect(report, spec, backend, outcome, staged, limits, req)
    finally:
        if not req.keep:
            shutil.rmtree(staged.root, ignore_errors=True)


def collect(report: Report, spec: TaskSpec, backend: SandboxBackend, outcome: SandboxOutcome,
            staged: Staged, limits: Limits, req: EvalRequest) -> Report:
    report.sandbox = SandboxInfo(
        backend=backend.name, limits=limits, exit_code=outcome.exit_code, signal=outcome.signal,
        timed_out=outcome.timed_out, oom_killed=outcome.oom_killed, limit_fired=outcome.limit_fired,
        wall_s=round(outcome.wall_s, 3), output_truncated=outcome.output_truncated,
        stdout_tail=outcome.stdout[-2000:].decode("utf-8", "replace"),
        stderr_tail=outcome.stderr[-4000:].decode("utf-8", "replace"),
        enforcement=outcome.enforcement)
    payload: JudgePayload | None = None
    try:
        payload = read_result(staged.out_dir / RESULT_NAME, staged.key, limits.result_bytes)
    except ResultProblem as p:
        report.errors.append(_no_result_error(p.error, outcome))
        log.warning("result_rejected", code=report.errors[-1].code)
        return report
    return build_report(report, spec, payload, outcome)


def _no_result_error(err: StageError, outcome: SandboxOutcome) -> StageError:
    """Without a verified record, a limit that fired is still the candidate's fault."""
    if outcome.limit_fired is not None:
        return StageError(stage="benchmark" if outcome.limit_fired == "timeout" else "compile",
                          code=outcome.limit_fired,
                          message=f"the sandbox was stopped by its {outcome.limit_fired} before the "
                                  "judge could report; the stage it was in is unknown",
                          detail={"stage_unknown": True, "record": err.code})
    if err.code == "result_missing":
        return StageError(stage="sandbox", code="judge_died",
                          message="the judge ended without a verified result (killed by the "
                                  f"candidate, or crashed); exit={outcome.exit_code} "
                                  f"signal={outcome.signal}",
                          detail={"exit_code": outcome.exit_code, "signal": outcome.signal})
    return err


def run_judge_mode(secret: dict[str, object], files: dict[str, str], *, backend: str = "auto",
                   device: str = "auto", limits: Limits | None = None) -> JudgePayload:
    """Run the judge in a special mode (``measure_peak``, ``calibrate``) and verify its record.

    ``files`` land read-only in ``/kg/in``. Raises :class:`InfrastructureError` when the
    sandbox produces no verified record.
    """
    from grader.errors import InfrastructureError

    dev = detect_device() if device == "auto" else device
    be = select_backend(backend, dev)  # type: ignore[arg-type]
    lim = limits or Limits(compile_s=60, run_s=600, memory_mib=8192)
    root, in_dir, out_dir = make_eval_dirs(None, "kgrader-mode-")
    for name, src in files.items():
        (in_dir / name).write_text(src, encoding="utf-8")
        (in_dir / name).chmod(0o444)
    key = secrets.token_bytes(32)
    write_secret(out_dir, {**secret, "key": key.hex(), "device": dev, "limits": lim.model_dump(),
                           "phase_seed": secrets.randbits(62)})
    try:
        outcome = be.run(SandboxSpec(in_dir=in_dir, out_dir=out_dir,
                                     argv=("python3", "-m", "sandbox.judge"), limits=lim,
                                     device=dev, label=uuid.uuid4().hex[:12]))  # type: ignore[arg-type]
        try:
            payload = read_result(out_dir / RESULT_NAME, key, lim.result_bytes)
        except ResultProblem as p:
            raise InfrastructureError(f"judge mode {secret.get('mode')} produced no verified result "
                                      f"({p.error.code}); stderr: "
                                      f"{outcome.stderr[-800:].decode('utf-8', 'replace')}") from None
        return payload
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure_peak(backend: str = "auto", device: str = "auto", quick: bool = False,
                 limits: Limits | None = None) -> JudgePayload:
    """Run the judge in calibration mode: the device's copy bandwidth and matmul peaks.

    Returns the verified payload (``peaks`` and ``environment``); raises
    :class:`InfrastructureError` when the sandbox cannot produce a verified record.
    """
    from grader.errors import InfrastructureError

    payload = run_judge_mode({"mode": "measure_peak", "quick": quick}, {}, backend=backend,
                             device=device, limits=limits)
    if payload.errors or payload.peaks is None:
        msg = payload.errors[0].message if payload.errors else "no peaks"
        raise InfrastructureError(f"calibration failed: {msg}")
    return payload
