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
  (:class:`grader.diagnostics.models.Diagnostics`: per-kernel Nsight Compute counters from a
  separate, untimed profile run; ``null`` fields with reasons where there are none);
* accept: ``accepted``, ``improvementFraction`` (median of ``(t_best - t_cand)/t_best``),
  ``baseline`` (``"best"`` or ``"none"``), ``evaluation`` (the records folder).

**Acceptance without a best.** With no ``best.py`` yet, there is nothing to pair with:
the candidate is accepted when it passes compile, correctness (tune and hidden shapes)
and benchmark, becomes ``best.py``, and ``improvementFraction`` is ``null`` with the
reason. The reference is not the baseline because a first correct kernel should
establish one even when it is slower than the trusted reference (e.g. the CPU
interpreter). Every later candidate must beat ``best.py`` in a paired, interleaved run.

Candidate faults are values (``ok: false``); a broken workspace raises
:class:`WorkspaceError`; an infrastructure fault is ``ok: false`` with stage ``sandbox``.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import filelock
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grader.errors import CandidateFileError, InfrastructureError, KgraderError, UsageError
from grader.evaluate import EvalRequest, StageName, evaluate
from grader.records import Records
from grader.report.model import Report
from grader.task import TaskSpec, format_validation_error, load_task

__all__ = [
    "TOOL_NAMES",
    "Workspace",
    "WorkspaceConfig",
    "WorkspaceError",
    "accept_candidate",
    "bench_kernel",
    "call_tool",
    "compile_kernel",
    "init_workspace",
    "measure_peak",
    "profile_kernel",
    "tool_schemas",
]

CONFIG_NAME = "kgrader.json"
RECORDS_NAME = "records"
LOCK_NAME = ".tool.lock"
TIMING_KEYS = ("mean_ms", "median_ms", "p95_ms", "std_ms", "min_ms", "cv", "samples",
               "bandwidth_gbps", "tflops", "dims")


class WorkspaceError(UsageError):
    """The workspace folder or its kgrader.json is missing or invalid (the operator's fault)."""

    code = "bad_workspace"


class WorkspaceConfig(BaseModel):
    """``WORKSPACE/kgrader.json``: what the operator fixed for every tool call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: str = Field(description="Task folder; relative paths are relative to the workspace.")
    backend: Literal["auto", "bwrap", "docker"] = "auto"
    device: Literal["auto", "cpu", "cuda", "rocm"] = "auto"
    policy: str | None = Field(None, description="Policy name or path; None: the task's.")
    quick_calibration: bool = Field(False, description="measure_peak/profile use the quick calibration.")
    hardware: str | None = Field(None, description="hardware.json path; None: the default.")
    gpu_ids: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class Workspace:
    """An opened, validated workspace."""

    root: Path
    config: WorkspaceConfig
    task_dir: Path
    spec: TaskSpec

    @classmethod
    def open(cls, root: str | Path) -> Workspace:
        """Read and validate ``root/kgrader.json`` and the task it names."""
        base = Path(root).resolve()
        cfg_path = base / CONFIG_NAME
        try:
            config = WorkspaceConfig.model_validate_json(cfg_path.read_bytes())
        except FileNotFoundError:
            raise WorkspaceError(f"{base} is not a workspace (no {CONFIG_NAME})",
                                 hint=f"kgrader workspace init {base} --task TASK_DIR") from None
        except ValidationError as e:
            raise WorkspaceError(f"{cfg_path}: invalid\n{format_validation_error(e)}") from None
        task_dir = (base / config.task).resolve()
        spec, _ = load_task(task_dir)
        return cls(base, config, task_dir, spec)

    @property
    def records(self) -> Records:
        """The workspace's records root (created on first use)."""
        return Records(self.root / RECORDS_NAME)

    @property
    def hardware_path(self) -> Path | None:
        """Where calibrations are cached (None: :func:`grader.measure.peaks.default_path`)."""
        return None if self.config.hardware is None else (self.root / self.config.hardware)


def init_workspace(root: str | Path, task_dir: str | Path, *, backend: str = "auto",
                   device: str = "auto", policy: str | None = None,
                   quick_calibration: bool = False, force: bool = False) -> Workspace:
    """Create ``root/kgrader.json`` naming ``task_dir`` (absolute); refuse to overwrite."""
    base = Path(root).resolve()
    load_task(task_dir)  # a workspace never points at a broken task
    cfg_path = base / CONFIG_NAME
    if cfg_path.exists() and not force:
        raise WorkspaceError(f"{cfg_path} exists; pass force to overwrite it")
    try:
        config = WorkspaceConfig.model_validate(
            {"task": str(Path(task_dir).resolve()), "backend": backend, "device": device,
             "policy": policy, "quick_calibration": quick_calibration})
    except ValidationError as e:
        raise WorkspaceError(f"invalid workspace settings\n{format_validation_error(e)}") from None
    base.mkdir(parents=True, exist_ok=True)
    tmp = cfg_path.with_name(f".{CONFIG_NAME}.tmp")
    tmp.write_text(config.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(cfg_path)
    (base / RECORDS_NAME).mkdir(exist_ok=True)
    return Workspace.open(base)


# --- shared plumbing ------------------------------------------------------------------


def _ws(workspace: str | Path | Workspace) -> Workspace:
    return workspace if isinstance(workspace, Workspace) else Workspace.open(workspace)


def _error_dict(stage: str, code: str, message: str, line: int | None = None,
                detail: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"stage": stage, "code": code, "message": message, "line": line, "detail": detail or {}}


def _fault(tool: str, e: KgraderError) -> dict[str, Any]:
    """A result for an exception raised while evaluating (not a candidate verdict)."""
    stage = "scan" if isinstance(e, CandidateFileError) else \
        "sandbox" if isinstance(e, InfrastructureError) else "usage"
    return {"tool": tool, "ok": False, "stage": stage, "errors": [_error_dict(stage, e.code, str(e))],
            "warnings": []}


def _base(tool: str, report: Report) -> dict[str, Any]:
    return {
        "tool": tool, "ok": report.ok, "stage": report.stage,
        "errors": [_error_dict(e.stage, e.code, e.message, e.line, e.detail) for e in report.errors],
        "warnings": list(report.warnings), "task": report.task, "device": report.device,
        "candidate_sha256": report.candidate.sha256 if report.candidate else None,
    }


def _not_reached(report: Report | None, what: str) -> str:
    if report is None or not report.errors:
        return f"{what} stage not reached"
    e = report.errors[0]
    return f"{what} stage not reached: {e.stage} failed ({e.code})"


def _timing_fields(report: Report) -> dict[str, Any]:
    out: dict[str, Any] = {"correct": report.correctness.passed if report.correctness else None}
    unmeasured: dict[str, str] = {}
    if report.correctness is None:
        unmeasured["correct"] = _not_reached(report, "correctness")
    else:
        c = report.correctness
        out["correctness"] = {"checks": c.checks, "max_abs_error": c.max_abs_error,
                              "max_rel_error": c.max_rel_error,
                              "first_bad": c.first_bad.model_dump(mode="json") if c.first_bad else None}
    t = report.timing
    if t is None:
        reason = _not_reached(report, "benchmark")
        out.update({k: None for k in TIMING_KEYS})
        unmeasured.update({k: reason for k in TIMING_KEYS})
    else:
        out.update({k: getattr(t, k) if k != "samples" else t.samples for k in TIMING_KEYS})
        out.update(cache=t.cache, clock=t.clock)
        unmeasured.update(t.unmeasured)
    out["unmeasured"] = unmeasured
    return out


def _evaluate(ws: Workspace, source: str, stages: tuple[StageName, ...],
              shape_kinds: tuple[str, ...], current: str | None = None) -> Report:
    if not isinstance(source, str):
        raise CandidateFileError(f"source must be a string, got {type(source).__name__}")
    with tempfile.TemporaryDirectory(prefix="kgrader-tool-") as tmp:
        cand = Path(tmp) / "candidate.py"
        cand.write_text(source, encoding="utf-8")
        cur = None
        if current is not None:
            cur = Path(tmp) / "current.py"
            cur.write_text(current, encoding="utf-8")
        req = EvalRequest(task_dir=ws.task_dir, candidate=cand, current=cur,
                          backend=ws.config.backend, device=ws.config.device,
                          policy=ws.config.policy, stages=stages, shape_kinds=shape_kinds,
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
            result = _fault(name, e)
        ws.records.log_tool_call(name, args, result)
    return result


# --- the tools ------------------------------------------------------------------------


def compile_kernel(workspace: str | Path | Workspace, source: str) -> dict[str, Any]:
    """Scan, import and launch once on the first tune shape; no correctness, no timing."""
    def body(ws: Workspace) -> dict[str, Any]:
        report = _evaluate(ws, source, ("compile",), ("tune",))
        return {**_base("compile_kernel", report),
                "compiled": report.ok and report.stage == "compile"}
    return _logged("compile_kernel", workspace, {"source": source}, body)


def bench_kernel(workspace: str | Path | Workspace, source: str) -> dict[str, Any]:
    """Compile, re-check correctness on tune and hidden shapes, then time (the task's protocol)."""
    def body(ws: Workspace) -> dict[str, Any]:
        report = _evaluate(ws, source, ("compile", "correctness", "benchmark"), ("tune", "hidden"))
        return {**_base("bench_kernel", report), **_timing_fields(report)}
    return _logged("bench_kernel", workspace, {"source": source}, body)


def _calibration(ws: Workspace, refresh: bool = False) -> Any:
    from grader.measure.peaks import get_peaks

    return get_peaks(ws.config.backend, ws.config.device, refresh=refresh,
                     quick=ws.config.quick_calibration, path=ws.hardware_path)


def _profile_fields(ws: Workspace, report: Report, source: str) -> dict[str, Any]:
    from grader.diagnostics.run import diagnose
    from grader.measure.peaks import environment_mismatches, forget
    from grader.measure.profile import analyze, with_counters

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
    return {"profile": fields, "profile_warnings": warnings,
            "diagnostics": diag.model_dump(mode="json"), "advice": diag.advice}


def profile_kernel(workspace: str | Path | Workspace, source: str) -> dict[str, Any]:
    """bench_kernel plus a roofline analysis against the calibrated peaks."""
    def body(ws: Workspace) -> dict[str, Any]:
        report = _evaluate(ws, source, ("compile", "correctness", "benchmark"), ("tune", "hidden"))
        out = {**_base("profile_kernel", report), **_timing_fields(report)}
        extra = _profile_fields(ws, report, source)
        prof: dict[str, Any] = extra["profile"]
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
        report = _evaluate(ws, source, ("compile", "correctness", "benchmark"), ("tune", "hidden"),
                           current=best)
        infra = any(e.stage == "sandbox" for e in report.errors)
        acc = report.acceptance
        if best is None:
            accepted = report.ok
        else:
            accepted = bool(acc is not None and acc.accepted and report.ok)
        folder = rec.new_evaluation(ws.task_dir, source, best)
        # An infrastructure fault is no decision about the candidate: no trajectory line.
        rec.finish(folder, report, None if infra else accepted)
        out = {**_base("accept_candidate", report), **_timing_fields(report)}
        out.update(ok=accepted, accepted=accepted, baseline="none" if best is None else "best",
                   improvementFraction=acc.improvement_fraction if acc else None,
                   positive_fraction=acc.positive_fraction if acc else None,
                   pairs=acc.pairs if acc else 0, rule=acc.rule if acc else None,
                   replicate_speedup=acc.replicate_speedup if acc else None,
                   reason=acc.reason if acc else _accept_reason(best, report),
                   evaluation=str(folder), best_path=str(rec.best_path))
        if acc is None:
            out["unmeasured"]["improvementFraction"] = (
                "no best.py yet: nothing to pair with" if best is None
                else _not_reached(report, "accept"))
        else:
            out["unmeasured"].update(
                {("improvementFraction" if k == "improvement_fraction" else k): v
                 for k, v in acc.unmeasured.items()})
        return out
    return _logged("accept_candidate", workspace, {"source": source}, body)


def _accept_reason(best: str | None, report: Report) -> str:
    if report.ok and best is None:
        return "first correct candidate: it becomes best.py (no best to pair with)"
    return _not_reached(report, "accept")


# --- schemas and dispatch -------------------------------------------------------------

_SOURCE = {"type": "object", "additionalProperties": False, "required": ["source"],
           "properties": {"source": {"type": "string", "minLength": 1,
                                     "description": "Complete Python source of the kernel module "
                                                    "(defines the task's entry point)."}}}
_NONE = {"type": "object", "additionalProperties": False, "properties": {}}

_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "compile_kernel": ("Statically scan the kernel source, import it in the sandbox and launch it "
                       "once on a tune shape. Returns ok, stage, errors (with line), warnings.",
                       _SOURCE),
    "bench_kernel": ("Check correctness (tune and hidden shapes, several seeds), then time the kernel "
                     "under the task's protocol. Returns ok, correct, mean_ms, median_ms, p95_ms, "
                     "std_ms, bandwidth_gbps, tflops.", _SOURCE),
    "profile_kernel": ("bench_kernel plus a roofline analysis against the calibrated device peaks "
                       "(ai, bound, bottleneck, bandwidth_utilization_pct, roofline_fraction) and, "
                       "on an NVIDIA GPU, hardware counters per kernel (occupancy, registers, "
                       "spills, DRAM/SM throughput, bank conflicts, warp stalls) with advice: "
                       "at most five sentences per kernel saying what to change.", _SOURCE),
    "measure_peak": ("The device's calibrated peaks: copy bandwidth (GB/s) and matmul TFLOP/s per "
                     "dtype (cached per device and software fingerprint).", _NONE),
    "accept_candidate": ("Compare the kernel with the current best in a paired, interleaved run; "
                         "when it is faster (or is the first correct kernel) it becomes the new best. "
                         "Returns accepted and improvementFraction.", _SOURCE),
}
TOOL_NAMES: tuple[str, ...] = tuple(_SPECS)

_FUNCS: dict[str, Callable[..., dict[str, Any]]] = {
    "compile_kernel": compile_kernel, "bench_kernel": bench_kernel, "profile_kernel": profile_kernel,
    "measure_peak": measure_peak, "accept_candidate": accept_candidate,
}


def tool_schemas() -> list[dict[str, Any]]:
    """The five tools in the function-calling format ``{"type": "function", "function": ...}``."""
    return [{"type": "function", "function": {"name": name, "description": desc,
                                              "parameters": json.loads(json.dumps(params))}}
            for name, (desc, params) in _SPECS.items()]


def tool_description(name: str) -> str:
    """The description of tool ``name`` (shared by the MCP server)."""
    return _SPECS[name][0]


def check_args(name: str, args: Any) -> dict[str, Any]:
    """Validate ``args`` against the tool's schema; raise :class:`UsageError` when wrong."""
    if name not in _SPECS:
        raise UsageError(f"unknown tool {name!r} (one of {', '.join(TOOL_NAMES)})")
    if not isinstance(args, dict):
        raise UsageError(f"arguments of {name} must be a JSON object, got {type(args).__name__}")
    props = _SPECS[name][1]["properties"]
    extra = sorted(set(args) - set(props))
    if extra:
        raise UsageError(f"{name} takes no argument(s) {extra}; it takes {sorted(props) or 'none'}")
    for req in _SPECS[name][1].get("required", []):
        if req not in args:
            raise UsageError(f"{name} needs argument {req!r}")
    if "source" in args and not isinstance(args["source"], str):
        raise UsageError(f"{name}: 'source' must be a string")
    return args


def call_tool(workspace: str | Path | Workspace, name: str, args: Any) -> dict[str, Any]:
    """Run tool ``name`` with JSON ``args`` (validated first; :class:`UsageError` if wrong)."""
    clean = check_args(name, args)
    return _FUNCS[name](workspace, **clean)
