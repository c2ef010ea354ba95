"""GPU MODE reference-kernels problems as kgrader tasks (``kgrader task import gpumode``).

A problem folder holds ``reference.py`` (``ref_kernel(data)``, ``generate_input(**args)``,
``check_implementation(data, output)``), ``task.yml`` (``tests:`` and ``benchmarks:``, lists
of argument dicts such as ``{"size": 1024, "seed": 4321}``) and, through ``files:``, helper
modules (``task.py``, ``../utils.py``); submissions define ``custom_kernel(data)``.

The mapping: integer arguments are the dimensions; the ``seed`` argument is replaced by
the judge's secret seeds; other arguments, the same in every entry, are passed as they
are. ``tests`` become the tune shapes, the first benchmark the timed shape and the other
benchmarks hidden shapes (each checked for correctness in every evaluation, as GPU MODE
checks each benchmark once). Tolerances come from ``make_match_reference(..., rtol=,
atol=)`` when the reference spells them as literals. ``check_implementation`` runs on
every checked call and decides values and dtypes (kgrader adds only a bound against
untouched or NaN outputs) unless the task sets ``problem.strict``. Which generated tensors
are output buffers the candidate may write is decided in the sandbox by the reference's
behaviour (:mod:`sandbox.problem.buffers`); the syntactic guess here is only its fallback.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

import yaml

from grader.errors import TaskError
from grader.formats.common import (
    DEFAULT_SEEDS,
    IMPORTED_ACCEPTANCE,
    ImportedTask,
    ProblemPathError,
    confined_file,
    merge,
    read_confined,
    read_source,
    task_name,
    top_level_functions,
    validate,
)

# GPU MODE's match_reference defaults, used when the reference names none.
DEFAULT_RTOL, DEFAULT_ATOL = 1e-5, 1e-8
SCRATCH_CALLS = {"empty", "empty_like", "zeros", "zeros_like", "full", "full_like", "empty_strided"}
NOT_HELPERS = {"submission.py", "reference.py", "eval.py"}


def read_yaml(path: Path) -> dict[str, Any]:
    """``task.yml``, opened without following a link (callers confine the path first)."""
    try:
        raw = yaml.safe_load(read_confined(path, "task.yml"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise TaskError(f"{path}{where}: invalid YAML: {getattr(e, 'problem', e)}") from None
    if not isinstance(raw, dict):
        raise TaskError(f"{path}: expected a mapping with tests: and benchmarks:")
    return raw


def _entries(raw: dict[str, Any], key: str, path: Path) -> list[dict[str, Any]]:
    items = raw.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise TaskError(f"{path}: {key}: must be a list of argument mappings")
    for i, item in enumerate(items):
        for k, v in item.items():
            if not isinstance(k, str) or not k.isidentifier():
                raise TaskError(f"{path}: {key}[{i}]: argument name {k!r} is not an identifier")
            if not isinstance(v, str | int | float | bool) and v is not None:
                raise TaskError(f"{path}: {key}[{i}].{k}: a {type(v).__name__} is not a plain value")
    return items


def split_args(entries: list[dict[str, Any]], seed_arg: str | None, path: Path
               ) -> tuple[list[dict[str, int]], dict[str, Any]]:
    """Each entry's dimensions (integer arguments) and the fixed non-integer arguments."""
    keys = {frozenset(k for k in e if k != seed_arg) for e in entries}
    if len(keys) > 1:
        raise TaskError(f"{path}: tests and benchmarks name different arguments: "
                        f"{sorted(sorted(k) for k in keys)}")
    fixed: dict[str, Any] = {}
    dims: list[dict[str, int]] = []
    for e in entries:
        d = {}
        for k, v in e.items():
            if k == seed_arg:
                continue
            if type(v) is int:
                if v < 1:
                    raise TaskError(f"{path}: argument {k}={v}: dimensions must be positive")
                d[k] = v
            elif k in fixed and fixed[k] != v:
                raise TaskError(f"{path}: argument {k!r} is not an integer and changes between "
                                f"entries ({fixed[k]!r}, {v!r}): kgrader cannot make it a dimension")
            else:
                fixed[k] = v
        dims.append(d)
    clash = {k for d in dims for k in d} & set(fixed)
    if clash:
        raise TaskError(f"{path}: argument(s) {sorted(clash)} are integers in some entries only")
    return dims, fixed


def tolerances(tree: ast.Module) -> tuple[float, float] | None:
    """``(rtol, atol)`` from ``check_implementation = make_match_reference(ref, rtol=, atol=)``."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and
                                                t.id == "check_implementation" for t in node.targets) \
                and isinstance(node.value, ast.Call):
            kw = {k.arg: k.value for k in node.value.keywords if k.arg}
            vals = {}
            for name, default in (("rtol", DEFAULT_RTOL), ("atol", DEFAULT_ATOL)):
                v = kw.get(name)
                vals[name] = float(v.value) if isinstance(v, ast.Constant) and \
                    isinstance(v.value, int | float) and not isinstance(v.value, bool) else default
            return vals["rtol"], vals["atol"]
    return None


def scratch_positions(fn: ast.FunctionDef) -> list[int]:
    """The syntactic guess at the output buffers: positions of the returned tuple made by
    ``torch.empty``, ``zeros`` ... (through method chains such as ``.contiguous()``) and
    never filled in place afterwards (``uniform_``, ``x[...] = ``: those are inputs).

    Only a fallback: the problem process classifies the generated tensors by the
    reference's behaviour (:mod:`sandbox.problem.buffers`) and uses this guess only where the
    reference is not deterministic."""
    made: dict[str, str] = {}
    filled: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call):
            made[node.targets[0].id] = _root_callee(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                _in_place(node.func.attr):
            name = _root_name(node.func.value)
            if name:
                filled.add(name)
        elif isinstance(node, ast.Assign | ast.AugAssign):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Subscript):
                    name = _root_name(t.value)
                    if name:
                        filled.add(name)
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple | ast.List):
            return [i for i, e in enumerate(node.value.elts) if _fresh(e, made, filled)]
    return []


def _in_place(method: str) -> bool:
    return method.endswith("_") and not method.startswith("_")


def _fresh(e: ast.expr, made: dict[str, str], filled: set[str]) -> bool:
    if isinstance(e, ast.Call) and _root_callee(e) in SCRATCH_CALLS:
        return True
    name = _root_name(e)
    return name is not None and made.get(name) in SCRATCH_CALLS and name not in filled


def _root_callee(call: ast.Call) -> str:
    """The innermost call of a method chain: ``empty`` for ``torch.empty(n).contiguous()``;
    "" when the chain fills it in place (``torch.empty(n).uniform_()``: an input)."""
    while isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Call):
        if _in_place(call.func.attr):
            return ""
        call = call.func.value
    return _callee(call.func)


def _root_name(e: ast.expr) -> str | None:
    """``x`` for ``x``, ``x.contiguous()``, ``x.t()`` (a method chain on a name)."""
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute):
        e = e.func.value
    return e.id if isinstance(e, ast.Name) else None


def _callee(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def problem_root(folder: Path) -> Path:
    """The tree a GPU MODE problem may reach: its problem set, the folder above it.

    GPU MODE keeps helpers shared by a set's problems there (``files:`` names
    ``../utils.py``); nothing above it, and nothing but ``.py`` files, is followed."""
    return Path(os.path.abspath(folder)).parent


def helper_modules(folder: Path, raw: dict[str, Any], root: Path | None = None) -> dict[str, str]:
    """Helper modules the problem ships (``files:`` entries, and task.py / utils.py beside it).

    Every path followed stays inside ``root`` (default :func:`problem_root`), through no
    symbolic link, to a regular ``.py`` file (:func:`grader.formats.common.confined_file`);
    anything else is a :class:`ProblemPathError` and the problem is not imported."""
    root = problem_root(folder) if root is None else root
    paths: dict[str, Path] = {}
    for i, f in enumerate(raw.get("files") or []):
        if isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("source"), str) \
                and f["name"].endswith(".py") and f["name"] not in NOT_HELPERS \
                and "@" not in f["source"]:
            what = f"{folder}/task.yml files[{i}] ({f['name']})"
            if not f["source"].endswith(".py"):
                raise ProblemPathError(f"{what}: source {f['source']!r} is not a .py file; a "
                                       "helper module's source must be Python")
            paths[f["name"][:-3]] = confined_file(root, folder, f["source"], what)
    for name in ("task", "utils"):
        if name not in paths and os.path.lexists(folder / f"{name}.py"):
            paths[name] = confined_file(root, folder, f"{name}.py", f"{folder}/{name}.py")
    out = {}
    for name, p in paths.items():
        if not name.isidentifier():
            continue
        out[name] = read_source(p, f"helper {name}.py")[0]
    return out


def import_problem(folder: Path, *, policy: str = "default",
                   overrides: dict[str, Any] | None = None, root: Path | None = None
                   ) -> ImportedTask:
    """One GPU MODE problem folder as a task (not yet written, not yet checked).

    ``root``: the tree its paths may reach (default :func:`problem_root`)."""
    root = problem_root(folder) if root is None else root
    if not os.path.lexists(folder / "task.yml"):
        raise TaskError(f"{folder}: no task.yml (not a GPU MODE problem folder)")
    yml = confined_file(root, folder, "task.yml", "problem file")
    raw = read_yaml(yml)
    if not os.path.lexists(folder / "reference.py"):
        raise TaskError(f"problem file not found: {folder / 'reference.py'}")
    text, tree = read_source(confined_file(root, folder, "reference.py", "problem file"))
    funcs = top_level_functions(tree)
    for need in ("ref_kernel", "generate_input"):
        if need not in funcs:
            raise TaskError(f"{folder}/reference.py defines no {need}()")
    gen_params = {a.arg for a in funcs["generate_input"].args.args + funcs["generate_input"].args.kwonlyargs}
    tests, benchmarks = _entries(raw, "tests", yml), _entries(raw, "benchmarks", yml)
    if not tests:
        raise TaskError(f"{yml}: no tests:")
    seed_arg = "seed" if "seed" in gen_params else None
    dims, fixed = split_args(tests + benchmarks, seed_arg, yml)
    tune, bench = dims[:len(tests)], dims[len(tests):]
    hidden = [b for b in bench[1:] if b not in tune]
    modules = helper_modules(folder, raw, root)
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | \
        {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    for name in ("utils", "task"):
        if name in imported and name not in modules:
            raise TaskError(f"{folder}/reference.py imports {name}, which the folder does not ship")
    checker = "check_implementation" if "check_implementation" in \
        {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
         if isinstance(t, ast.Name)} | set(funcs) else None
    rtol, atol = tolerances(tree) or (DEFAULT_RTOL, DEFAULT_ATOL)
    desc = raw.get("description")
    spec_raw: dict[str, Any] = {
        "name": task_name(folder.resolve().name, "gm_"),
        "description": (str(desc).strip()[:2000] if desc else "") +
                       f" (GPU MODE problem {folder.name}, imported by kgrader)",
        "tags": ["gpumode"],
        "contract": "gpumode",
        "entrypoint": "custom_kernel",
        "problem": {"reference": "ref_kernel", "inputs": "generate_input", "checker": checker,
                    "seed_arg": seed_arg, "fixed_args": fixed,
                    "scratch": scratch_positions(funcs["generate_input"]),
                    "support_modules": modules},
        "shapes": {"tune": tune, "hidden": hidden, "timed": bench[0] if bench else None},
        "correctness": {"seeds": DEFAULT_SEEDS, "atol": atol, "rtol": rtol},
        "policy": policy,
        "acceptance": dict(IMPORTED_ACCEPTANCE),
        "limits": {"compile_s": 600.0, "memory_mib": 16384},  # a load_inline build (see
        # kernelbench.IMPORTED_LIMITS)
    }
    spec = validate(merge(spec_raw, overrides), yml)
    notes = [f"{len(tune)} tests -> tune shapes; "
             + (f"benchmark 0 timed, {len(hidden)} more hidden" if bench else "no benchmarks: "
                "the first test is timed"),
             f"tolerances rtol={rtol:g} atol={atol:g}"
             + ("" if tolerances(tree) else " (GPU MODE's defaults: the reference names none)")]
    guess = spec.problem.scratch if spec.problem is not None else []
    notes.append("output buffers found by behaviour in the sandbox (tensors the reference "
                 "writes or does not read; the report's warnings say which); syntactic guess "
                 f"{guess or 'none'}, used only if the reference is not deterministic")
    if checker and not (spec.problem is not None and spec.problem.strict):
        notes.append("check_implementation decides values and dtypes (kgrader: only untouched "
                     "outputs and NaN where the reference has none); problem.strict: true for "
                     "kgrader's compare too")
    elif checker:
        notes.append("strict: kgrader's element-wise compare and dtype check on top of "
                     "check_implementation")
    else:
        notes.append("no check_implementation: kgrader's element-wise compare decides")
    return ImportedTask(spec, text, folder, notes)


def find_problems(path: Path) -> list[Path]:
    """``path`` if it is a problem folder, else the problem folders under it (found through
    no symbolic link: a linked task.yml, reference.py or folder is not a problem here)."""
    if (path / "task.yml").is_file() and (path / "reference.py").is_file():
        return [path]
    if not path.is_dir():
        raise TaskError(f"not a folder: {path}")
    found = sorted(p.parent for p in path.rglob("task.yml")
                   if _unlinked(path, p) and _unlinked(path, p.parent / "reference.py"))
    if not found:
        raise TaskError(f"{path}: no GPU MODE problem folders (task.yml beside reference.py)")
    return found


def _unlinked(root: Path, p: Path) -> bool:
    try:
        confined_file(root, root, str(p.relative_to(root)), "problem file")
    except ProblemPathError:
        return False
    return True
