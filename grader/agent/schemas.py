"""The agent tools' definitions: names, descriptions, JSON schemas, argument checks.

The one definition the function-calling format (``kgrader tools schema``) and the MCP
server's ``tools/list`` are both generated from (:func:`tool_schemas`, :func:`mcp_tools`),
so their descriptions, enums and bounds cannot drift; the tools themselves are in
:mod:`grader.agent.tools`. :func:`check_args` validates a call against that same schema
and raises :class:`BadArgument` (code ``bad_argument``, the field, a one-line reason) or, for
a tool that does not exist, :class:`UnknownTool` (code ``unknown_tool``); both are the
caller's fault (origin ``usage``).
"""

from __future__ import annotations

import json
from typing import Any

from grader.errors import UsageError
from grader.experience.search import SEARCH_DESCRIPTION, SEARCH_SCHEMA, check_search_args

_SOURCE = {"type": "object", "additionalProperties": False, "required": ["source"],
           "properties": {"source": {"type": "string", "minLength": 1,
                                     "description": "Complete Python source of the kernel module "
                                                    "(defines the task's entry point)."}}}
_NONE = {"type": "object", "additionalProperties": False, "properties": {}}

_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "describe_task": ("The task you are writing a kernel for: entry point and contract, tensors in "
                      "call order with roles, dtypes and symbolic shapes, the tune shapes and the "
                      "timed shape (hidden shapes: a count only), tolerances, the benchmark and "
                      "acceptance protocol, the policy and what it allows, the cost model and "
                      "roofline floor when known, and the reference's source when the workspace "
                      "shows it. Call it first; it runs nothing.", _NONE),
    "compile_kernel": ("Statically scan the kernel source, import it in the sandbox and launch it "
                       "once on a tune shape. Returns ok, stage, errors (with line), warnings.",
                       _SOURCE),
    "bench_kernel": ("Check correctness (tune and hidden shapes, several seeds), then time the kernel "
                     "under the task's protocol, paired with the task's reference in the same run. "
                     "Returns ok, correct, mean_ms, median_ms, p95_ms, std_ms, bandwidth_gbps, "
                     "tflops, reference_ms and speedup_vs_reference (paired), best_ms and "
                     "speedup_vs_best (best.py's recorded time), each with its *_source.",
                     _SOURCE),
    "profile_kernel": ("bench_kernel plus a roofline analysis against the calibrated device peaks "
                       "(ai, bound, bottleneck, bandwidth_utilization_pct, roofline_fraction) and, "
                       "on an NVIDIA GPU, hardware counters per kernel (occupancy, registers, "
                       "spills, DRAM/SM throughput, bank conflicts, warp stalls) with advice: "
                       "at most five sentences per kernel saying what to change.", _SOURCE),
    "measure_peak": ("The device's calibrated peaks: copy bandwidth (GB/s) and matmul TFLOP/s per "
                     "dtype (cached per device and software fingerprint).", _NONE),
    "accept_candidate": ("Compare the kernel with the current best in a paired, interleaved run; "
                         "when it is faster (or is the first correct kernel) it becomes the new best. "
                         "Returns accepted, verdict (in words: '1.42x faster than best.py "
                         "(98% CI 1.38-1.46), accepted'), improvementFraction (the report's "
                         "improvement_fraction: median of (t_best - t_cand)/t_best, a fraction, "
                         "-17.09 = 18.1x slower), best_ms and speedup_vs_best, "
                         "reference_ms and speedup_vs_reference, and slower_than_reference (a first "
                         "kernel slower than the reference still becomes best, flagged).", _SOURCE),
    "search_experience": (SEARCH_DESCRIPTION, SEARCH_SCHEMA),
}
TOOL_NAMES: tuple[str, ...] = tuple(_SPECS)


class BadArgument(UsageError):
    """A tool call's arguments do not match the tool's schema (the caller's fault: origin
    ``usage``, as in the CLI's error document; not the candidate's, whose kernel never ran)."""

    code = "bad_argument"
    stage = "arguments"

    def __init__(self, tool: str, field: str | None, reason: str) -> None:
        where = f"{tool}.{field}" if field else tool
        super().__init__(f"{where}: {reason}")
        self.tool, self.field, self.reason = tool, field, reason

    def as_error(self) -> dict[str, Any]:
        """The typed tool error a client gets (MCP and the Python API)."""
        return {"stage": self.stage, "code": self.code, "origin": "usage",
                "field": self.field, "message": self.reason, "line": None, "detail": {}}


class UnknownTool(BadArgument):
    """A call of a tool that does not exist (the caller's fault, like a bad argument)."""

    code = "unknown_tool"
    stage = "usage"

    def __init__(self, tool: str) -> None:
        super().__init__(tool, None, f"unknown tool {tool!r} (one of {', '.join(TOOL_NAMES)})")


_TYPES: dict[str, Any] = {"string": str, "integer": int, "boolean": bool, "array": list,
                          "object": dict}


def _check_value(tool: str, field: str, schema: dict[str, Any], v: Any) -> None:
    """The subset of JSON Schema the tools use: type, enum, bounds, lengths, items."""
    want = schema.get("type")
    if want is not None and (not isinstance(v, _TYPES[want])
                             or (want == "integer" and isinstance(v, bool))):
        raise BadArgument(tool, field, f"must be of type {want}, got {type(v).__name__}")
    if "enum" in schema and v not in schema["enum"]:
        raise BadArgument(tool, field, f"must be one of {', '.join(map(str, schema['enum']))}")
    if isinstance(v, str):
        if len(v) < schema.get("minLength", 0):
            raise BadArgument(tool, field, f"must have at least {schema['minLength']} character(s)")
        if "maxLength" in schema and len(v) > schema["maxLength"]:
            raise BadArgument(tool, field, f"must have at most {schema['maxLength']} characters")
    if want == "integer":
        if "minimum" in schema and v < schema["minimum"]:
            raise BadArgument(tool, field, f"must be >= {schema['minimum']}")
        if "maximum" in schema and v > schema["maximum"]:
            raise BadArgument(tool, field, f"must be <= {schema['maximum']}")
    if isinstance(v, list):
        if "maxItems" in schema and len(v) > schema["maxItems"]:
            raise BadArgument(tool, field, f"must have at most {schema['maxItems']} items")
        for i, item in enumerate(v):
            _check_value(tool, f"{field}[{i}]", schema.get("items", {}), item)


def mcp_tools() -> list[dict[str, Any]]:
    """The tools as MCP ``tools/list`` entries: ``name``, ``description``, ``inputSchema``
    (the same objects as :func:`tool_schemas`' ``parameters``)."""
    return [{"name": f["function"]["name"], "description": f["function"]["description"],
             "inputSchema": f["function"]["parameters"]} for f in tool_schemas()]


def tool_schemas() -> list[dict[str, Any]]:
    """The tools in the function-calling format ``{"type": "function", "function": ...}``."""
    return [{"type": "function", "function": {"name": name, "description": desc,
                                              "parameters": json.loads(json.dumps(params))}}
            for name, (desc, params) in _SPECS.items()]


def tool_description(name: str) -> str:
    """The description of tool ``name`` (shared by the MCP server)."""
    return _SPECS[name][0]


def check_args(name: str, args: Any) -> dict[str, Any]:
    """Validate ``args`` against the tool's schema; raise :class:`UsageError` when wrong."""
    if name not in _SPECS:
        raise UnknownTool(name)
    if not isinstance(args, dict):
        raise BadArgument(name, None, f"arguments must be a JSON object, got {type(args).__name__}")
    props = _SPECS[name][1]["properties"]
    extra = sorted(set(args) - set(props))
    if extra:
        raise BadArgument(name, extra[0], f"unknown argument; {name} takes "
                                          f"{', '.join(sorted(props)) or 'no arguments'}")
    for req in _SPECS[name][1].get("required", []):
        if req not in args:
            raise BadArgument(name, req, "is required")
    for field, v in args.items():
        _check_value(name, field, props[field], v)
    if name == "search_experience":
        try:
            check_search_args(args)
        except BadArgument:
            raise
        except UsageError as e:  # a value the schema cannot express (e.g. a dims filter)
            field = next((f for f in props if f"'{f}'" in e.message or
                          e.message.startswith(f"{f} ")), None)
            if field is None and "dim" in e.message:
                field = "dims"
            raise BadArgument(name, field, e.message.splitlines()[0]) from None
    return args
