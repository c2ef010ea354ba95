"""The ``search_experience`` agent tool, and the JSON shape of one returned attempt.

The tool ranks past attempts for the workspace's task: same task and tags first, then
the same hardware, then text relevance, then passing and fastest, then recent (see
:mod:`grader.experience.query`). Each result carries its verdict, key figures and a
one-line lesson (:mod:`grader.experience.lessons`).

What an agent may not learn from it: the task's *hidden* shapes. Results list only tune
shapes, the failing shape a report already disclosed, and the timed shape; and a dims
filter from the agent matches only those kinds, so a range query cannot probe for a
hidden shape.
"""

from __future__ import annotations

import platform
from dataclasses import replace
from typing import Any

from grader.backends.select import detect_device
from grader.errors import UsageError
from grader.experience.extract import hardware_key
from grader.experience.hooks import host_cpu_model
from grader.experience.lessons import lesson
from grader.experience.model import ExperienceError
from grader.experience.query import Query, parse_dim
from grader.experience.store import ExperienceStore, Hit, default_path
from grader.measure.peaks import _nvidia_gpus
from grader.task import TaskSpec

__all__ = ["SEARCH_DESCRIPTION", "SEARCH_SCHEMA", "check_search_args", "current_hardware_key",
           "hit_json", "search_for_task"]

AGENT_SHAPE_KINDS = ("tune", "failed", "timed")
MAX_TOOL_RESULTS = 20
MAX_TOOL_SOURCE_BYTES = 16 * 1024
_STR = {"type": "string", "minLength": 1, "maxLength": 256}

SEARCH_DESCRIPTION = (
    "Search past graded attempts (this and other tasks) for lessons before writing a kernel. "
    "Ranks the same task/tag and hardware first, then text relevance, then passing and "
    "fastest, then recent. Each result has its verdict, stage, error codes, median_ms, "
    "bandwidth, speed-up and a one-line lesson. Filters are optional.")
SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "properties": {
        "text": {**_STR, "description": "Words that must all occur in the error messages, "
                                        "diagnostics or source (e.g. 'mask tail')."},
        "task": {**_STR, "description": "Only this task (default: all, this task ranked first)."},
        "tag": {**_STR, "description": "Only this op family, e.g. 'softmax', 'reduction', 'gemm'."},
        "stage": {"type": "string", "enum": ["scan", "sandbox", "compile", "correctness",
                                             "benchmark", "accept"],
                  "description": "Only attempts whose last stage reached is this."},
        "code": {**_STR, "description": "Only attempts with this error code, e.g. 'wrong_values'."},
        "outcome": {"type": "string", "enum": ["passed", "failed"]},
        "dims": {"type": "array", "maxItems": 8, "items": {**_STR, "maxLength": 64},
                 "description": "Shape filters all met by one shape, e.g. ['N>=1024', 'M=1..64']."},
        "hardware": {**_STR, "description": "Substring of the hardware text, e.g. 'H200'."},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_TOOL_RESULTS, "default": 5},
        "include_source": {"type": "boolean", "default": False,
                           "description": "Also return each attempt's source (cut to 16 KiB)."},
    },
}


def _opt_str(args: dict[str, Any], name: str) -> str | None:
    v = args.get(name)
    if v is None:
        return None
    if not isinstance(v, str) or not v or len(v) > 256:
        raise UsageError(f"search_experience: {name!r} must be a non-empty string of at most 256 characters")
    return v


def check_search_args(args: dict[str, Any]) -> Query:
    """The query the arguments ask for; :class:`UsageError` for a wrong type or value."""
    limit = args.get("limit", 5)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_TOOL_RESULTS:
        raise UsageError(f"search_experience: 'limit' must be an integer from 1 to {MAX_TOOL_RESULTS}")
    dims = args.get("dims") or []
    if not isinstance(dims, list) or len(dims) > 8 or not all(isinstance(d, str) for d in dims):
        raise UsageError("search_experience: 'dims' must be a list of at most 8 strings")
    if not isinstance(args.get("include_source", False), bool):
        raise UsageError("search_experience: 'include_source' must be true or false")
    stage, outcome = _opt_str(args, "stage"), _opt_str(args, "outcome")
    if stage is not None and stage not in SEARCH_SCHEMA["properties"]["stage"]["enum"]:
        raise UsageError(f"search_experience: unknown stage {stage!r}")
    if outcome not in (None, "passed", "failed"):
        raise UsageError("search_experience: 'outcome' must be 'passed' or 'failed'")
    tag = _opt_str(args, "tag")
    return Query(task=_opt_str(args, "task"), tags=(tag,) if tag else (), stage=stage,
                 code=_opt_str(args, "code"), outcome=outcome,  # type: ignore[arg-type]
                 hardware=_opt_str(args, "hardware"), dims=tuple(parse_dim(d) for d in dims),
                 text=_opt_str(args, "text"), limit=limit, dim_kinds=AGENT_SHAPE_KINDS).validate()


def current_hardware_key(backend: str, device: str) -> str | None:
    """The hardware key of the device this workspace grades on (None when unknown)."""
    try:
        kind = detect_device() if device == "auto" else device
        if kind == "cpu":
            return hardware_key("cpu", platform.processor() or platform.machine(), host_cpu_model())
        gpus = _nvidia_gpus() if kind == "cuda" else []
        name = gpus[0].split(",")[0].strip() if gpus else None
        return hardware_key(kind, name, None) if name else None
    except Exception:  # no preference is a fine answer; the search still works
        return None


def hit_json(hit: Hit, *, include_source: bool = False, shape_kinds: tuple[str, ...] | None = None,
             source_cap: int | None = None) -> dict[str, Any]:
    """One attempt as JSON: verdict, key figures, lesson; ``shape_kinds`` limits the shapes shown."""
    a = hit.attempt
    out: dict[str, Any] = {
        "id": hit.id, "task": a.task, "tags": list(a.tags), "origin": a.origin,
        "origin_ref": a.origin_ref, "created_at": a.created_at, "ok": a.ok, "stage": a.stage,
        "accepted": a.accepted, "lesson": lesson(a),
        "errors": [{"stage": e.stage, "code": e.code, "message": e.message, "line": e.line}
                   for e in a.errors],
        "warnings": list(a.warnings),
        "median_ms": a.median_ms, "mean_ms": a.mean_ms, "min_ms": a.min_ms,
        "bandwidth_gbps": a.bandwidth_gbps, "tflops": a.tflops, "speedup": a.speedup,
        "improvement_fraction": a.improvement_fraction, "roofline_fraction": a.roofline_fraction,
        "bottleneck": a.bottleneck, "diagnostics": a.diagnostics, "dtypes": list(a.dtypes),
        "shapes": [{"kind": s.kind, "dims": s.dims} for s in a.shapes
                   if shape_kinds is None or s.kind in shape_kinds],
        "hardware": a.hardware, "candidate_sha256": a.candidate_sha256,
        "source_truncated": a.source_truncated,
    }
    if include_source:
        src = a.source
        if src is not None and source_cap is not None and len(src.encode()) > source_cap:
            src = src.encode()[:source_cap].decode("utf-8", "ignore")
            out["source_truncated"] = True
        out["source"] = src
    return out


def search_for_task(spec: TaskSpec, backend: str, device: str, args: dict[str, Any]) -> dict[str, Any]:
    """The tool's return for a workspace fixed to ``spec`` on ``(backend, device)``."""
    q = check_search_args(args)
    tags = tuple(getattr(spec, "tags", ()) or ()) or (spec.name,)
    base = {"tool": "search_experience", "ok": True, "stage": None, "errors": [], "warnings": []}
    try:
        path = default_path()
    except ExperienceError as e:
        return {**base, "warnings": [str(e)], "count": 0, "results": []}
    if not path.is_file():
        return {**base, "warnings": [f"no experience store yet at {path}"], "store": str(path),
                "count": 0, "results": []}
    ranked = replace(q, prefer_task=spec.name, prefer_tags=tags,
                     prefer_hardware_key=current_hardware_key(backend, device))
    with ExperienceStore.open(path, create=False) as store:
        hits = store.query(ranked)
        text_search = "fts5" if store.fts else "like"
    results = [hit_json(h, include_source=bool(args.get("include_source", False)),
                        shape_kinds=AGENT_SHAPE_KINDS, source_cap=MAX_TOOL_SOURCE_BYTES) for h in hits]
    return {**base, "store": str(path), "text_search": text_search, "count": len(results),
            "results": results}
