"""The agent tools' result dicts: errors, the fault of an exception, a report's common
fields and its timing fields (absent stages are ``null`` with the reason in ``unmeasured``)."""

from __future__ import annotations

from typing import Any

from grader.agent.schemas import BadArgument
from grader.errors import CandidateFileError, KgraderError, UsageError
from grader.grading.redact import ShapeFacts, scrub_text
from grader.report.model import Report

__all__ = ["TIMING_KEYS", "base", "error_dict", "fault", "not_reached", "timing_fields"]

TIMING_KEYS = ("mean_ms", "median_ms", "p95_ms", "std_ms", "min_ms", "cv", "samples",
               "bandwidth_gbps", "tflops", "dims")


def error_dict(stage: str, code: str, message: str, origin: str, line: int | None = None,
               detail: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"stage": stage, "code": code, "origin": origin, "message": message, "line": line,
            "detail": detail or {}}


def fault(tool: str, e: BaseException, facts: ShapeFacts | None = None) -> dict[str, Any]:
    """A result for an exception raised while evaluating: the agent tools' one map from an
    exception to their output. A bad argument is the caller's
    fault (stage ``arguments``, code ``bad_argument``, the field; an unknown tool: stage
    ``usage``, code ``unknown_tool``; both origin ``usage``); an unusable source the
    candidate's (stage ``scan``); another usage error is the operator's set-up (the
    workspace, task, policy or best.py: stage ``usage``, origin ``infrastructure``); only
    the machine's faults are stage ``sandbox``. Any other exception is a kgrader bug:
    ``internal_error``, its text withheld (it could carry what the candidate must not
    read; the caller logs it)."""
    if not isinstance(e, KgraderError):
        return {"tool": tool, "ok": False, "stage": "sandbox", "warnings": [],
                "errors": [{"stage": "sandbox", "code": "internal_error",
                            "origin": "infrastructure", "line": None, "detail": {},
                            "message": "kgrader failed internally; the traceback is on the "
                                       "server's stderr"}]}
    if isinstance(e, BadArgument):
        return {"tool": tool, "ok": False, "stage": e.stage, "errors": [e.as_error()],
                "warnings": []}
    if isinstance(e, CandidateFileError):
        stage, origin = "scan", "candidate"
    elif isinstance(e, UsageError):
        stage, origin = "usage", "infrastructure"
    else:
        stage, origin = "sandbox", "infrastructure"
    message = scrub_text(str(e), facts) if facts is not None else str(e)
    return {"tool": tool, "ok": False, "stage": stage,
            "errors": [error_dict(stage, e.code, message, origin)], "warnings": []}


def base(tool: str, report: Report) -> dict[str, Any]:
    return {
        "tool": tool, "ok": report.ok, "stage": report.stage,
        "errors": [error_dict(e.stage, e.code, e.message, e.origin, e.line, e.detail)
                   for e in report.errors],
        "warnings": list(report.warnings), "task": report.task, "device": report.device,
        "candidate_sha256": report.candidate.sha256 if report.candidate else None,
    }


def not_reached(report: Report | None, what: str) -> str:
    if report is None or not report.errors:
        return f"{what} stage not reached"
    e = report.errors[0]
    return f"{what} stage not reached: {e.stage} failed ({e.code})"


def timing_fields(report: Report) -> dict[str, Any]:
    out: dict[str, Any] = {"correct": report.correctness.passed if report.correctness else None}
    unmeasured: dict[str, str] = {}
    if report.correctness is None:
        unmeasured["correct"] = not_reached(report, "correctness")
    else:
        c = report.correctness
        out["correctness"] = {"checks": c.checks, "max_abs_error": c.max_abs_error,
                              "max_rel_error": c.max_rel_error,
                              "first_bad": c.first_bad.model_dump(mode="json") if c.first_bad else None}
    t = report.timing
    if t is None:
        reason = not_reached(report, "benchmark")
        out.update({k: None for k in TIMING_KEYS})
        unmeasured.update({k: reason for k in TIMING_KEYS})
    else:
        out.update({k: getattr(t, k) if k != "samples" else t.samples for k in TIMING_KEYS})
        out.update(cache=t.cache, clock=t.clock)
        unmeasured.update(t.unmeasured)
    out["unmeasured"] = unmeasured
    return out
