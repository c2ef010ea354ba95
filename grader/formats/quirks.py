"""Quirks of field problems: what a problem does that a grader could get wrong, and what
kgrader does about each.

Two sources. *Static* quirks are read from the problem's source here, on the host, as
syntax only (the host never imports the problem): size constants written as products
(``N = 2048 * 2``), live Dropout, BatchNorm in training mode. *Measured* quirks come from
the judge's ``check`` mode (:mod:`sandbox.judge.task_check`), which runs the reference in the
sandbox: an output that is constant or zero, a tolerance an all-zero output meets, an
output that depends on torch's random state, non-tensor inputs, half-precision outputs,
a float64 evaluation that did not fit the memory limit. Every quirk is shown at import
and by ``kgrader task check``, in the human output and under ``--json``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

DROPOUT_CLASSES = {"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
                   "FeatureAlphaDropout"}
DROPOUT_FUNCS = {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                 "feature_alpha_dropout"}
BATCHNORM_CLASSES = {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm",
                     "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d"}
# Machine epsilon of the half-precision dtypes: their own rounding of an output |y| is
# up to eps/2 * |y|, whatever the kernel.
EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


@dataclass(frozen=True)
class Quirk:
    """One quirk: ``code`` (stable), what was ``found`` and where, the ``action`` kgrader
    takes, and whether it was read from the source (``static``) or ``measured``."""

    code: str
    found: str
    action: str
    source: str = "static"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    def line(self) -> str:
        return f"quirk {self.code}: {self.found} -> {self.action}"


def merge_quirks(*groups: list[Quirk]) -> list[Quirk]:
    """Every quirk once (the first of a code and finding wins), in order."""
    seen: set[tuple[str, str]] = set()
    out: list[Quirk] = []
    for q in (q for g in groups for q in g):
        if (q.code, q.found) not in seen:
            seen.add((q.code, q.found))
            out.append(q)
    return out


# ---- numbers written in the source -------------------------------------------------------

_OPS: dict[type[ast.operator], Callable[[int, int], int | None]] = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b if b else None,
        ast.Pow: lambda a, b: a ** b if 0 <= b <= 64 and abs(a) <= 1 << 20 else None,
        ast.LShift: lambda a, b: a << b if 0 <= b <= 48 else None}
LIMIT = 1 << 48  # no size constant of a real problem is larger; nothing larger is evaluated


def int_expr(node: ast.expr, known: dict[str, int]) -> int | None:
    """The value of an integer expression of literals and ``known`` names (``2048 * 2``,
    ``16 * 1024``, ``1 << 20``, ``batch * 4``); None for anything else."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = int_expr(node.operand, known)
        return None if v is None else -v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        a, b = int_expr(node.left, known), int_expr(node.right, known)
        if a is None or b is None:
            return None
        v = _OPS[type(node.op)](a, b)
        return v if v is not None and abs(v) < LIMIT else None
    return None


def number(node: ast.expr | None, known: dict[str, float]) -> float | None:
    """A literal number, or a module constant's value (``p = 0.2``; ``nn.Dropout(p)``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and \
            not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.Name):
        return known.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = number(node.operand, known)
        return None if v is None else -v
    return None


def module_numbers(tree: ast.Module) -> dict[str, float]:
    """Module-level ``NAME = <number>`` (the last assignment of each name)."""
    out: dict[str, float] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            v = number(node.value, out)
            if v is not None:
                out[node.targets[0].id] = v
    return out


def size_products(exprs: dict[str, tuple[int, str]], varied: list[str]) -> list[Quirk]:
    """A quirk for every size constant written as an expression (name -> value, source)."""
    out = []
    for name, (value, src) in sorted(exprs.items()):
        how = "hidden shapes vary it" if name in varied else \
            "fixed (read by the model, another constant or get_init_inputs)"
        out.append(Quirk("size_product", f"{name} = {src} (= {value})",
                         f"read as the size {name}={value}; {how}"))
    return out


# ---- KernelBench models ------------------------------------------------------------------

def _callee(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _on_self(func: ast.expr) -> bool:
    """``self.dropout(x)``: a call of the model's own attribute (a module), not torch's."""
    while isinstance(func, ast.Attribute):
        func = func.value
    return isinstance(func, ast.Name) and func.id == "self"


def _arg(call: ast.Call, pos: int, kw: str) -> ast.expr | None:
    for k in call.keywords:
        if k.arg == kw:
            return k.value
    return call.args[pos] if len(call.args) > pos else None


def init_values(tree: ast.Module, model: str, init: str) -> dict[str, ast.expr]:
    """``Model.__init__``'s parameters bound to what ``get_init_inputs`` returns for them
    (a parameter name -> the expression at its position), where both are plain."""
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == model), None)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == init), None)
    ctor = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
                None) if cls is not None else None
    if ctor is None or fn is None:
        return {}
    ret = next((n.value for n in ast.walk(fn) if isinstance(n, ast.Return)), None)
    if not isinstance(ret, ast.List | ast.Tuple):
        return {}
    params = [a.arg for a in ctor.args.args[1:]]
    return {p: e for p, e in zip(params, ret.elts, strict=False)}


def _resolve(node: ast.expr | None, bound: dict[str, ast.expr]) -> ast.expr | None:
    if isinstance(node, ast.Name) and node.id in bound:
        return bound[node.id]
    return node


def kernelbench_model(tree: ast.Module, model: str = "Model", init: str = "get_init_inputs"
                      ) -> list[Quirk]:
    """Live Dropout and training-mode BatchNorm in a KernelBench problem, from its source.

    KernelBench builds the reference model and never calls ``eval()``: it runs in training
    mode, and kgrader runs it the same way."""
    nums = module_numbers(tree)
    bound = init_values(tree, model, init)
    evals = any(isinstance(n, ast.Call) and _callee(n.func) == "eval" for n in ast.walk(tree))
    out: list[Quirk] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _callee(node.func)
        where = f"line {node.lineno}: {ast.unparse(node)[:80]}"
        if name in DROPOUT_CLASSES or (name in DROPOUT_FUNCS and not _on_self(node.func)):
            q = _dropout(node, name, where, nums, bound, evals)
            if q is not None:
                out.append(q)
        elif name in BATCHNORM_CLASSES and not evals:
            out.append(Quirk("train_batchnorm", f"{where} (the model is never put in eval mode)",
                             "run in training mode, as KernelBench runs it: normalised by each "
                             "batch's own statistics, running statistics updated and never "
                             "compared; a candidate must use batch statistics too"))
        elif name == "batch_norm" and not _on_self(node.func):
            training = _arg(node, 5, "training")
            if isinstance(training, ast.Constant) and training.value is True:
                out.append(Quirk("train_batchnorm", where, "graded as written: batch "
                                 "statistics (training=True)"))
    return out


def _dropout(node: ast.Call, name: str, where: str, nums: dict[str, float],
             bound: dict[str, ast.expr], evals: bool) -> Quirk | None:
    functional = name in DROPOUT_FUNCS
    p_node = _resolve(_arg(node, 1 if functional else 0, "p"), bound)
    p = 0.5 if p_node is None else number(p_node, nums)
    if functional:
        training = _arg(node, 2, "training") or _arg(node, 2, "train")
        if isinstance(training, ast.Constant) and training.value is False:
            return None
        if training is None and "alpha" in name:
            return None  # F.alpha_dropout's training defaults to False
    elif evals:
        return None
    if p == 0.0:
        return None
    what = f"p={p:g}" if p is not None else f"p from {ast.unparse(p_node)[:40] if p_node else '?'}"
    return Quirk("live_dropout", f"{where} ({what}, training mode)",
                 "graded as written: the reference's mask comes from torch's random state, "
                 "seeded by the judge; a candidate's own random state gives another mask, so "
                 "only an output the mask does not change can match (the check measures "
                 "whether it does: quirk rng_dependent)")


# ---- measured, from the judge's check record ------------------------------------------------

def measured(shapes: list[dict[str, Any]], atol: float, rtol: float,
             by_dtype: dict[str, tuple[float, float]]) -> list[Quirk]:
    """Quirks the judge measured on the task's shapes (``check`` mode's per-shape figures):
    one per kind (and output), found on the first shape that shows it, with a count of
    the other shapes that do too."""
    first: dict[tuple[str, str], Quirk] = {}
    more: dict[tuple[str, str], int] = {}

    def add(output: str, q: Quirk) -> None:
        key = (q.code, output)
        if key in first:
            more[key] = more.get(key, 0) + 1
        else:
            first[key] = q

    for s in shapes:
        where = f"{s.get('kind', '?')} {s.get('dims', {})}"
        for o in s.get("outputs", []) or []:
            if not isinstance(o, dict):
                continue
            name, dtype = str(o.get("name", "?")), str(o.get("dtype", "?"))
            a, r = by_dtype.get(dtype, (atol, rtol))
            if o.get("constant"):
                value = o.get("value")
                add(name, Quirk("zero_output" if value == 0 else "constant_output",
                                f"{where}: output {name} is {value!r} everywhere",
                                "warned, graded as is: a candidate that returns this constant "
                                "passes without computing anything", "measured"))
            elif o.get("zeros_pass"):
                add(name, Quirk("tolerance_above_magnitude",
                                f"{where}: output {name} has max |y| {o.get('max_abs', 0):.3g}, "
                                f"within atol={a:g} (rtol={r:g}): an all-zero output passes",
                                "warned, the format's tolerance kept (its own harness passes "
                                "zeros too); lower correctness.atol in task.json to tighten",
                                "measured"))
            if dtype in EPS:
                add(dtype, Quirk("half_precision", f"outputs in {dtype}",
                                 f"tolerance atol={a:g} rtol={r:g} for {dtype}; the float64 "
                                 f"evaluation is rounded to {dtype} before it is compared, so "
                                 f"the dtype's own rounding (eps {EPS[dtype]:.2g}) is not "
                                 "counted against the task; a tolerance finer than one "
                                 "rounding step still fails the check", "measured"))
        if s.get("rng_dependent"):
            add("", Quirk("rng_dependent", f"{where}: two reference calls on the same inputs "
                          "differ (it draws from torch's random state: live Dropout or a "
                          "random op)", "warned; no float64 comparison; a candidate matches "
                          "only if its output does not depend on the draw", "measured"))
        nt = s.get("non_tensor_inputs")
        if nt:
            add("", Quirk("non_tensor_inputs", f"{where}: the inputs hold {nt} plain value(s) "
                          "beside the tensors", "handed to both sides unchanged, the same "
                          "values in every call", "measured"))
        if s.get("float64_skipped"):
            add("", Quirk("float64_skipped", f"{where}: {s['float64_skipped']}",
                          "tolerances not checked against float64 on this shape; the rest of "
                          "the check ran", "measured"))
    return [_with_more(q, more.get(k, 0)) for k, q in first.items()]


def _with_more(q: Quirk, shapes: int) -> Quirk:
    """A measured quirk seen on more shapes than its first says so (a task's precision is
    one fact, whatever the shape). Quirk kinds are not error codes."""
    kind = q.code
    if not shapes or kind == "half_precision":
        return q
    return Quirk(q.code, f"{q.found} (and on {shapes} more shape(s))", q.action, q.source)
