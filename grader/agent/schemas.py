"""The agent tools' definitions: names, descriptions, JSON schemas, argument checks.

Data the function-calling format, the CLI (``kgrader tools schema``) and the MCP server
share; the tools themselves are in :mod:`grader.agent.tools`.
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
    "search_experience": (SEARCH_DESCRIPTION, SEARCH_SCHEMA),
}
TOOL_NAMES: tuple[str, ...] = tuple(_SPECS)


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
    if name == "search_experience":
        check_search_args(args)
    return args
