"""``kgrader task new NAME``: a task folder that passes ``kgrader task check`` as it stands.

The scaffold is a generated-shape task (``shapes.generate``) so that a new task starts
with the edge cases on: an elementwise add over one dimension drawn per evaluation, a
reference, and a correct Triton candidate that masks its tail and handles empty tensors.
Edit the three files into the task you mean, then run ``kgrader task check`` again.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from grader.errors import TaskError, UsageError
from grader.task import TaskSpec


def task_json(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": "out = x + y elementwise over N float32 values, N drawn per evaluation "
                       "(scaffolded by kgrader task new: edit me).",
        "tags": ["elementwise"],
        "entrypoint": "launch",
        "tensors": [
            {"name": "x", "role": "input", "dtype": "float32", "shape": ["N"]},
            {"name": "y", "role": "input", "dtype": "float32", "shape": ["N"]},
            {"name": "out", "role": "output", "dtype": "float32", "shape": ["N"]},
        ],
        "shapes": {
            "timed": {"N": 65536},
            "generate": {"dims": {"N": {"min": 1, "max": 70000, "align": 128, "allow_zero": True}},
                         "tune": 2, "hidden": 8},
        },
        "correctness": {"seeds": [17, 29], "atol": 1e-5, "rtol": 1e-5},
        "benchmark": {"warmup": 2, "samples": 5, "reps": 2, "cache": "cold"},
        "cost_model": {"bytes": "12*N", "flops": "N"},
        "limits": {"compile_s": 60, "run_s": 120, "memory_mib": 4096},
        "policy": "triton-only",
    }


REFERENCE = '''"""Trusted reference: out = x + y (destination passing: inputs, then outputs)."""

import torch


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    torch.add(x, y, out=out)
'''

GOOD = '''"""A correct candidate: one program per BLOCK elements, the tail masked, empty input handled."""

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    if n == 0:
        return
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
'''


def scaffold(name: str, out: Path, force: bool = False) -> Path:
    """Write ``out/NAME/`` (task.json, reference.py, candidates/good.py)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name):
        raise UsageError(f"task name {name!r} must be an identifier (letters, digits, _)")
    folder = out / name
    if folder.exists() and not force:
        raise TaskError(f"{folder} exists (pass --force to replace it)")
    raw = task_json(name)
    TaskSpec.model_validate(raw)  # the scaffold itself must be a valid task
    (folder / "candidates").mkdir(parents=True, exist_ok=True)
    (folder / "task.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    (folder / "reference.py").write_text(REFERENCE, encoding="utf-8")
    (folder / "candidates" / "good.py").write_text(GOOD, encoding="utf-8")
    return folder
