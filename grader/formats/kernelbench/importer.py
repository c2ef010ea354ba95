"""KernelBench problems as kgrader tasks (``kgrader task import kernelbench``).

A KernelBench problem file defines ``class Model(nn.Module)``, ``get_inputs()``,
``get_init_inputs()`` and size constants (``batch_size = 16``); a submission defines
``ModelNew`` with the same constructor and forward. The file is read here as text and
syntax only (the host never imports torch or the problem): the importer finds the
module-level int constants that ``get_inputs``/``get_init_inputs`` read, takes the file's
values as the tune shape, and makes hidden shapes by moving the constants only
``get_inputs`` reads by a little (``+1``, ``-1``, mixed; never a multiple of 16). Those
change the tensors but not the model; the sandboxed check that follows an import drops
any variant the reference cannot run.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

from grader.errors import TaskError
from grader.formats import quirks
from grader.formats.common import (
    DEFAULT_SEEDS,
    IMPORTED_ACCEPTANCE,
    ImportedTask,
    confined_file,
    merge,
    names_used,
    read_source,
    task_name,
    top_level_functions,
    validate,
)

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
# KernelBench's own tolerances for its correctness check, by precision: 1e-4 for float32,
# 1e-2 for float16 and bfloat16 (atol = rtol). One 1e-2 for every dtype let a matmul and a
# ReLU 0.5% off pass where KernelBench rejects them.
ATOL = RTOL = 1e-4
BY_DTYPE = {"float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2)}
# load_inline's first build compiles torch's extension headers (1-3 minutes on an H200 for
# one .cu and one .cpp): KernelBench's most common submission must not fail compile_timeout.
# Memory: on CUDA the judge, the problem process and the runner each map ~0.7 GB, and the
# build's cc1plus (1.2 GB) and cudafe++ (1.8 GB) run side by side; under the default 4 GiB the
# cgroup reclaimed their pages for minutes (one .cpp still compiling after 175 s on an H200).
IMPORTED_LIMITS = {"compile_s": 600.0, "memory_mib": 16384}


def is_problem(tree: ast.Module) -> bool:
    defined = {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}
    return all(r in defined for r in REQUIRED)


def size_constants(tree: ast.Module) -> dict[str, int]:
    """Module-level ``NAME = <positive int>`` assigned exactly once; the int may be written
    as an expression of literals and earlier such constants (``N = 2048 * 2``)."""
    return {k: v for k, (v, _) in sizes(tree).items()}


def sizes(tree: ast.Module) -> dict[str, tuple[int, str | None]]:
    """:func:`size_constants` with each value's source when it is an expression (else None)."""
    seen: dict[str, int] = {}
    assigned: list[tuple[str, ast.expr]] = []
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        if not isinstance(target, ast.Name):
            for t in (node.targets if isinstance(node, ast.Assign) else []):
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        seen[n.id] = seen.get(n.id, 0) + 2  # unpacking: not a plain constant
            continue
        seen[target.id] = seen.get(target.id, 0) + 1
        if value is not None:
            assigned.append((target.id, value))
    known: dict[str, int] = {}
    out: dict[str, tuple[int, str | None]] = {}
    for name, value in assigned:
        if seen.get(name) != 1:
            continue
        v = quirks.int_expr(value, known)
        if v is not None and v >= 1:
            known[name] = v
            out[name] = (v, None if isinstance(value, ast.Constant) else ast.unparse(value)[:80])
    return out


def plan(tree: ast.Module) -> tuple[dict[str, int], list[str]]:
    """The size constants the generators read (the shape), and those hidden shapes vary.

    A constant varies only if ``get_inputs`` reads it and nothing else does (not
    ``get_init_inputs``, not the model, no other function): then a new value changes the
    tensors and nothing about the model both sides build."""
    consts = size_constants(tree)
    funcs = top_level_functions(tree)
    used_inputs = names_used(funcs["get_inputs"]) & set(consts)
    used_init = names_used(funcs["get_init_inputs"]) & set(consts)
    used_else: set[str] = set()  # read by the model, another function or another constant
    for node in tree.body:
        if node is not funcs["get_inputs"] and node is not funcs["get_init_inputs"]:
            used_else |= names_used(node)
    dims = {k: consts[k] for k in consts if k in used_inputs | used_init}
    varied = sorted(k for k in used_inputs if k not in used_init and k not in used_else)
    return dims, varied


def variants(base: dict[str, int], varied: list[str]) -> list[dict[str, int]]:
    """A few hidden shapes near ``base``: all varied constants up, all down, and mixed."""
    if not varied:
        return []
    moves = [[+1] * len(varied), [-1] * len(varied),
             [(+1 if i % 2 == 0 else -1) for i in range(len(varied))] if len(varied) > 1
             else [+3]]
    out: list[dict[str, int]] = []
    for move in moves:
        shape = dict(base)
        for name, step in zip(varied, move, strict=True):
            shape[name] = _nudge(base[name], step)
        if shape != base and shape not in out:
            out.append(shape)
    return out


def _nudge(v: int, step: int) -> int:
    """``v + step``, moved on until it is positive, new and not a multiple of 16."""
    x = v + step
    if x < 1:
        x, step = v + 1, 1
    while x % 16 == 0 or x == v or x < 1:
        x += 1 if step > 0 else -1
        if x < 1:
            x, step = v + 1, 1
    return x


def import_problem(path: Path, *, policy: str = "cuda-inline",
                   overrides: dict[str, Any] | None = None, root: Path | None = None
                   ) -> ImportedTask:
    """One KernelBench problem file as a task (not yet written, not yet checked).

    ``root``: the tree the file must lie in, reached through no symbolic link (default:
    its own folder); a linked or non-regular file is a :class:`grader.formats.common.ProblemPathError`."""
    folder = Path(os.path.abspath(path)).parent
    root = folder if root is None else root
    if not os.path.lexists(path):
        raise TaskError(f"problem file not found: {path}")
    text, tree = read_source(confined_file(root, folder, path.name, "problem file"))
    if not is_problem(tree):
        missing = [r for r in REQUIRED if r not in
                   {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}]
        raise TaskError(f"{path}: not a KernelBench problem (no {', '.join(missing)})")
    dims, varied = plan(tree)
    name = task_name(path.stem, "kb_")
    fixed = sorted(set(dims) - set(varied))
    raw: dict[str, Any] = {
        "name": name,
        "description": f"KernelBench problem {path.name}, imported by kgrader. Hidden shapes "
                       f"vary {', '.join(varied) or 'nothing'}"
                       f"{'; fixed: ' + ', '.join(fixed) if fixed else ''}.",
        "tags": ["kernelbench"],
        "contract": "module",
        "entrypoint": "ModelNew",
        "problem": {"reference": "Model", "inputs": "get_inputs", "init": "get_init_inputs",
                    "varied": varied},
        "shapes": {"tune": [dims] if dims else [{}], "hidden": variants(dims, varied)},
        "correctness": {"seeds": DEFAULT_SEEDS, "atol": ATOL, "rtol": RTOL,
                        "by_dtype": {k: list(v) for k, v in BY_DTYPE.items()}},
        "policy": policy,
        "acceptance": dict(IMPORTED_ACCEPTANCE),
        "limits": dict(IMPORTED_LIMITS),
    }
    spec = validate(merge(raw, overrides), path)
    notes = [f"hidden shapes vary {', '.join(varied)}" if varied else
             "no size constant can vary safely: no hidden shapes"]
    exprs = {k: (v, src) for k, (v, src) in sizes(tree).items() if src is not None and k in dims}
    found = quirks.size_products(exprs, varied) + quirks.kernelbench_model(tree)
    return ImportedTask(spec, text, path, notes, found)


def find_problems(path: Path) -> list[Path]:
    """``path`` itself, or the KernelBench problem files in a folder (recursively)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise TaskError(f"not a file or folder: {path}")
    found = []
    for p in sorted(path.rglob("*.py")):
        try:  # through no symbolic link, as import_problem will insist
            _, tree = read_source(confined_file(path, path, str(p.relative_to(path)),
                                                "problem file"))
        except TaskError:
            continue
        if is_problem(tree):
            found.append(p)
    if not found:
        raise TaskError(f"{path}: no KernelBench problem files (Model, get_inputs, get_init_inputs)")
    return found
