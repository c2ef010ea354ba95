"""Argument structures of the returned-output contracts: a JSON template with tensor holes.

A field problem's generator returns a structure (KernelBench: a list of arguments; GPU
MODE: whatever ``generate_input`` returns, tuples, dicts, scalars). The judge flattens it
into its tensors, which get slots in the shared buffer, and a JSON template that says
where each tensor goes; the runner rebuilds the same structure around views of its
buffer. Only plain data crosses: tensors become holes, scalars and strings stay values.
"""

from __future__ import annotations

from typing import Any

import torch

Template = Any  # JSON: {"tensor": i} | {"value": v} | {"tuple": [...]} | {"list": [...]} | ...

MAX_DEPTH = 16


class UnsupportedValue(TypeError):
    """A generator produced something that cannot cross to the runner as plain data."""


def _dtype_name(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def flatten(obj: Any, tensors: list[torch.Tensor] | None = None, depth: int = 0
            ) -> tuple[Template, list[torch.Tensor]]:
    """``obj`` as a template and its tensors in template order."""
    out = [] if tensors is None else tensors
    if depth > MAX_DEPTH:
        raise UnsupportedValue(f"structure nested deeper than {MAX_DEPTH}")
    if isinstance(obj, torch.Tensor):
        out.append(obj)
        return {"tensor": len(out) - 1}, out
    if obj is None or isinstance(obj, bool | int | str):
        return {"value": obj}, out
    if isinstance(obj, float):
        if obj != obj or obj in (float("inf"), float("-inf")):
            return {"float": repr(obj)}, out
        return {"value": obj}, out
    if isinstance(obj, torch.dtype):
        return {"dtype": _dtype_name(obj)}, out
    if isinstance(obj, tuple | list):
        kind = "tuple" if isinstance(obj, tuple) else "list"
        return {kind: [flatten(x, out, depth + 1)[0] for x in obj]}, out
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise UnsupportedValue("a dict with non-string keys")
        return {"dict": [[k, flatten(v, out, depth + 1)[0]] for k, v in obj.items()]}, out
    raise UnsupportedValue(f"a value of type {type(obj).__name__}")


def rebuild(template: Template, tensors: list[torch.Tensor], depth: int = 0) -> Any:
    """The structure ``template`` describes, its holes filled from ``tensors``."""
    if depth > MAX_DEPTH or not isinstance(template, dict) or len(template) != 1:
        raise UnsupportedValue(f"malformed template {str(template)[:80]}")
    (kind, v), = template.items()
    if kind == "tensor":
        return tensors[int(v)]
    if kind == "value":
        return v
    if kind == "float":
        return float(v)
    if kind == "dtype":
        return getattr(torch, str(v))
    if kind == "tuple":
        return tuple(rebuild(x, tensors, depth + 1) for x in v)
    if kind == "list":
        return [rebuild(x, tensors, depth + 1) for x in v]
    if kind == "dict":
        return {str(k): rebuild(x, tensors, depth + 1) for k, x in v}
    raise UnsupportedValue(f"unknown template kind {kind!r}")


def returned_tensors(obj: Any) -> list[Any]:
    """What a call returned, as a flat list: one tensor, or a tuple/list of them.

    The items are returned as they are; callers check each is a plain tensor."""
    if isinstance(obj, tuple | list):
        return list(obj)
    return [obj]
