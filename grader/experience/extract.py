"""From a report (and the task and source it graded) to an :class:`Attempt`.

Pure functions: nothing here opens the store, and nothing runs or imports the source.

**Hardware.** The fingerprint reuses :func:`grader.measure.peaks.sandbox_fingerprint` on
the report's ``environment`` (what the judge saw: device name, torch, triton, python,
CUDA, SM); the CPU model is added from the host only when the caller graded on this
host just now (``host_cpu_model``), since the judge's environment does not carry it.
``hardware`` is readable text for substring queries; ``hardware_key`` identifies the
device alone (kind, name, CPU model), so that a torch upgrade still counts as the same
hardware when the agent tool ranks "same hardware first".

**Identity.** ``key`` is the sha256 of the report's canonical JSON, so the same
evaluation reached twice (hooked live, then imported from its records folder) is stored
once.

**Hidden shapes are never stored.** Agents search this store (and may read its file), so
an attempt is built from the candidate-facing copy of the report
(:func:`grader.grading.redact.redact`: hidden shapes as ``{"hidden_shape": k}``, the text of
failures after a hidden shape withheld), and the task's hidden shapes are not kept.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from grader.experience.model import Attempt, ErrorItem, Origin, Shape
from grader.grading.redact import HIDDEN_KEY, ShapeFacts, facts_for, redact, scrub_text
from grader.measure.peaks import sandbox_fingerprint
from grader.report.model import Report
from grader.task import TaskSpec, spec_or_none

__all__ = [
    "TaskFacts",
    "attempt_from_leaderboard",
    "attempt_from_report",
    "hardware_key",
    "hardware_of",
    "report_key",
    "task_facts",
]


class TaskFacts:
    """What the store keeps about a task: name, tags, dtypes, shapes, acceptance threshold."""

    def __init__(self, name: str, tags: tuple[str, ...], dtypes: tuple[str, ...],
                 shapes: tuple[Shape, ...], min_improvement: float | None) -> None:
        self.name, self.tags, self.dtypes = name, tags, dtypes
        self.shapes, self.min_improvement = shapes, min_improvement


def task_facts(task: TaskSpec | Mapping[str, Any] | None, fallback_name: str | None) -> TaskFacts:
    """Facts from a parsed task, a raw task.json mapping, or nothing (the name only).

    Tags are the task's ``tags``, else its name (the op family is unknown, the task is not).
    """
    spec = spec_or_none(task)
    if spec is None:
        name = fallback_name or (str(task.get("name")) if isinstance(task, Mapping)
                                 and isinstance(task.get("name"), str) else "unknown")
        return TaskFacts(name, (name,), (), (), None)
    tags = tuple(getattr(spec, "tags", ()) or ()) or (spec.name,)
    shapes = tuple(Shape("tune", dict(b)) for b in spec.shapes.tune)  # never the hidden ones
    dtypes = tuple(dict.fromkeys(t.dtype for t in spec.tensors))
    return TaskFacts(spec.name, tags, dtypes, shapes, spec.acceptance.min_improvement_fraction)


def _device_kind(report: Report) -> str:
    return (report.device or "unknown").split(":", 1)[0].strip() or "unknown"


def hardware_key(kind: str, device_name: str | None, cpu_model: str | None) -> str:
    """A short id of the device alone (no software versions)."""
    raw = "\0".join((kind, device_name or "", cpu_model or ""))
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def hardware_of(report: Report, host_cpu_model: str | None = None) -> tuple[str, str]:
    """``(hardware text, hardware key)`` of the report's environment (see module doc)."""
    kind = _device_kind(report)
    backend = report.sandbox.backend if report.sandbox else "unknown"
    fp = sandbox_fingerprint(report.environment, kind, backend)
    name = fp.get("device_name")
    cpu = host_cpu_model if kind == "cpu" else None
    parts = [f"{kind} {name}" if name else kind]
    if cpu:
        parts[0] += f" ({cpu})"
    parts += [f"{k} {fp[k]}" for k in ("torch", "triton", "python", "cuda", "sm", "driver") if k in fp]
    parts.append(f"backend {backend}")
    return " | ".join(parts), hardware_key(kind, str(name) if name else None, cpu)


def report_key(report: Report) -> str:
    """sha256 of the canonical (compact) report JSON: the identity of one evaluation."""
    return hashlib.sha256(report.model_dump_json().encode("utf-8")).hexdigest()


def _speedup(report: Report) -> float | None:
    acc = report.acceptance
    if acc is None:
        return None
    if acc.replicate_speedup is not None and acc.replicate_speedup > 0:
        return acc.replicate_speedup
    r = acc.improvement_fraction
    return 1.0 / (1.0 - r) if r is not None and r < 1 else None


def _figures(report: Report) -> dict[str, Any]:
    out: dict[str, Any] = {}
    c = report.correctness
    if c is not None:
        out.update(correct=c.passed, mismatch_fraction=c.mismatch_fraction,
                   max_abs_error=c.max_abs_error, max_rel_error=c.max_rel_error)
        if c.first_bad is not None:
            fb = c.first_bad
            out["first_bad"] = {"tensor": fb.tensor[:64], "index": fb.index[:8],
                                "expected": fb.expected, "actual": fb.actual,
                                "dims": dict(list(fb.dims.items())[:8]),
                                "shape_kind": fb.shape_kind, "phase": fb.phase[:32]}
    acc = report.acceptance
    if acc is not None:
        out.update(pairs=acc.pairs, positive_fraction=acc.positive_fraction, rule=acc.rule,
                   acceptance_reason=acc.reason[:300])
    sb = report.sandbox
    if sb is not None and (sb.limit_fired or sb.timed_out or sb.oom_killed):
        out.update(limit_fired=sb.limit_fired, timed_out=sb.timed_out, oom_killed=sb.oom_killed)
    if report.timing is not None:
        out.update(p95_ms=report.timing.p95_ms, cv=report.timing.cv, samples=report.timing.samples)
    return out


def _diagnostics(report: Report, extra: str) -> str:
    lines = [extra.strip()] if extra.strip() else []
    t = report.timing
    if t is not None and t.roofline_floor_ms:
        lines.append(f"roofline floor {t.roofline_floor_ms:.4g} ms, median {t.median_ms:.4g} ms")
    if t is not None and t.flagged_samples:
        lines.append(f"{t.flagged_samples} timing samples flagged (work escaped the timed stream)")
    if report.acceptance is not None:
        lines.append(f"acceptance: {report.acceptance.reason}")
    # The sandbox's stdout/stderr stay out: a candidate can print what it saw there (the
    # hidden shapes), and agents search this text.
    if report.sandbox is not None and report.sandbox.limit_fired:
        lines.append(f"sandbox limit fired: {report.sandbox.limit_fired}")
    return "\n".join(lines)


def _shapes(facts: TaskFacts, report: Report) -> tuple[Shape, ...]:
    """The task's tune shapes, the failing and the timed one: from the redacted report,
    so a hidden one (``{"hidden_shape": k}``) is left out."""
    def public(d: dict[str, int]) -> bool:
        return bool(d) and HIDDEN_KEY not in d

    shapes = list(facts.shapes)
    c = report.correctness
    if c is not None and c.first_bad is not None and public(c.first_bad.dims):
        shapes.insert(0, Shape("failed", dict(c.first_bad.dims)))
    if report.timing is not None and public(report.timing.dims):
        shapes.append(Shape("timed", dict(report.timing.dims)))
    if not facts.shapes and c is not None and not report.shapes:
        # No task to tell tune from hidden: only the first checked shape (the compile
        # stage's, a tune shape) is known to be public.
        shapes += [Shape("tune", dict(d)) for d in c.shapes_checked[:1] if public(d)]
    return tuple(shapes)


def attempt_from_report(report: Report, *, origin: Origin, task: TaskSpec | Mapping[str, Any] | None,
                        source: str | None, accepted: bool | None = None,
                        origin_ref: str | None = None, host_cpu_model: str | None = None,
                        diagnostics: str = "", roofline_fraction: float | None = None,
                        bottleneck: str | None = None, speedup: float | None = None,
                        key: str | None = None, shape_facts: ShapeFacts | None = None) -> Attempt:
    """The attempt for ``report`` (redacted, capped). ``accepted=None``: from the report's
    acceptance. ``shape_facts``: the task's, when ``task`` is not at hand (a leaderboard
    state keeps them); else they come from ``task``."""
    shape_facts = (shape_facts.with_report(report) if shape_facts is not None
                   else facts_for(task, report))
    report = redact(report, shape_facts)
    facts = task_facts(task, report.task)
    hardware, hw_key = hardware_of(report, host_cpu_model)
    t = report.timing
    if roofline_fraction is None and t is not None and t.roofline_floor_ms and t.median_ms > 0:
        roofline_fraction = t.roofline_floor_ms / t.median_ms
    acc = report.acceptance
    if accepted is None and acc is not None:
        accepted = acc.accepted
    return Attempt(
        key=key or report_key(report), task=report.task or facts.name, tags=facts.tags,
        origin=origin, origin_ref=origin_ref, ok=report.ok, stage=report.stage,
        created_at=report.created_at, accepted=accepted, dtypes=facts.dtypes,
        shapes=_shapes(facts, report), device=report.device, hardware=hardware,
        hardware_key=hw_key, candidate_sha256=report.candidate.sha256 if report.candidate else None,
        source=source,
        errors=tuple(ErrorItem(e.stage, e.code, e.message, e.line) for e in report.errors),
        warnings=tuple(report.warnings),
        median_ms=t.median_ms if t else None, mean_ms=t.mean_ms if t else None,
        min_ms=t.min_ms if t else None, bandwidth_gbps=t.bandwidth_gbps if t else None,
        tflops=t.tflops if t else None,
        speedup=speedup if speedup is not None else _speedup(report),
        improvement_fraction=acc.improvement_fraction if acc else None,
        min_improvement_fraction=_threshold(report, facts),
        roofline_fraction=roofline_fraction, bottleneck=bottleneck,
        diagnostics=scrub_text(_diagnostics(report, diagnostics), shape_facts),
        figures=_figures(report),
    ).capped()


def _threshold(report: Report, facts: TaskFacts) -> float | None:
    if report.acceptance is not None:
        for outcome in report.acceptance.rules:
            v = outcome.numbers.get("min_improvement_fraction")
            if isinstance(v, int | float) and not isinstance(v, bool):
                return float(v)
    return facts.min_improvement


def parse_report(text: str | bytes) -> Report | None:
    """A report from JSON text, or ``None`` when it is not a valid report."""
    try:
        return Report.model_validate_json(text)
    except (ValidationError, ValueError):
        return None


def load_json(text: str | bytes) -> Any:
    """JSON or ``None``."""
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return None


def attempt_from_leaderboard(row: Any, *, source: str | None, task: TaskSpec | Mapping[str, Any] | None,
                             host_cpu_model: str | None = None,
                             shape_facts: ShapeFacts | None = None) -> Attempt:
    """The attempt for one leaderboard :class:`~grader.leaderboard.state.EvalRow`.

    The leaderboard times every submission against the task's reference, so its
    acceptance outcome is no decision about a best: ``accepted`` stays ``None``, the
    speed-up is the row's (over the reference), and ``ok`` is the leaderboard's verdict
    (a correct submission slower than the reference still passed).
    """
    ref = f"leaderboard {row.submission} ({row.round})"
    report = parse_report(row.report_json) if row.report_json else None
    if report is not None:
        a = attempt_from_report(report, origin="leaderboard", task=task, source=source,
                                origin_ref=ref, host_cpu_model=host_cpu_model, speedup=row.speedup,
                                shape_facts=shape_facts)
        return replace(a, accepted=None, ok=row.verdict == "ok")
    facts = task_facts(task, row.task)
    key = hashlib.sha256("\0".join(("leaderboard", *row.key)).encode()).hexdigest()
    errors = (ErrorItem(row.stage or "scan", row.code or "failed",
                        _row_message(row, shape_facts or facts_for(task))),) if row.code else ()
    return Attempt(key=key, task=row.task, tags=facts.tags, origin="leaderboard", origin_ref=ref,
                   ok=row.verdict == "ok", stage=row.stage,
                   created_at=row.finished_at or datetime.now(UTC).isoformat(timespec="seconds"),
                   dtypes=facts.dtypes, shapes=facts.shapes, candidate_sha256=row.file_sha,
                   source=source, errors=errors, median_ms=row.t_sub_ms, speedup=row.speedup
                   ).capped()


def _row_message(row: Any, shape_facts: ShapeFacts) -> str:
    """A leaderboard row's message without its report: kept (scrubbed) only when the row
    failed before any hidden shape could have been run."""
    if row.stage in ("scan", "compile") or not shape_facts.has_hidden:
        return scrub_text(str(row.message), shape_facts)
    return f"{row.stage} failed ({row.code}); the message is withheld (no report to redact it by)"
