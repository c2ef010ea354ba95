"""Per-node-type handlers of the Python walker (one small function per AST node kind).

Each handler gets the walker, the node and the context bits of its parent, reports what
the policy matches, updates bindings, and returns the context for the node's children.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable
from typing import TYPE_CHECKING

from grader.scan import native

if TYPE_CHECKING:
    from grader.scan.python_ast import Walker

BUILTIN_NAMES = frozenset(dir(builtins)) | {"__builtins__", "__loader__", "__spec__"}
JIT_DECORATORS = frozenset({
    "triton.jit", "triton.autotune", "triton.heuristics", "triton.runtime.jit",
    "triton.runtime.jit.jit", "triton.runtime.autotune", "triton.runtime.autotuner.autotune",
    "triton.runtime.heuristics",
})
IMPORTERS = frozenset({"__import__", "builtins.__import__", "importlib.import_module"})
GETATTR = frozenset({"getattr", "builtins.getattr"})
ATTR_SETTERS = frozenset({"setattr", "delattr", "builtins.setattr", "builtins.delattr"})
BROAD = frozenset({"Exception", "BaseException"})

# Context bits: inside a @triton.jit body; inside the body of a catch-all try; the node is
# the inner part of a dotted chain (only the whole chain ``a.b.c`` is matched, once).
JIT, TRY, INNER = 1, 2, 4

Pieces = list[tuple[str, int]]
Handler = Callable[["Walker", ast.AST, int], int]


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def on_import(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.Import | ast.ImportFrom)
    for name in w.bind_import(node):
        w.report_all(w.c.refs(name), node)
    return ctx


def on_name(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.Name)
    if not ctx & INNER and not isinstance(node.ctx, ast.Store):
        q = w.qual(node)
        if q is not None:
            w.report_all(w.c.refs(q), node)
    return ctx & ~INNER


def on_attribute(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.Attribute)
    hits = w.c.attributes.get(node.attr)
    if hits:
        w.report_all(hits, node)
    if not ctx & INNER:
        q = w.qual(node)
        if q is not None:
            w.report_all(w.c.refs(q), node)
    return ctx & ~INNER


def _attr_builtins(w: Walker, node: ast.Call, fq: str) -> None:
    """getattr/setattr/delattr: dynamic names, module targets, literal dunder names."""
    args = node.args
    literal = len(args) >= 2 and _is_str(args[1])
    if literal:
        name = args[1].value  # type: ignore[attr-defined]
        w.report_all(w.c.attributes.get(name, ()), node)
        base = w.qual(args[0])
        if base is not None:
            w.report_all(w.c.refs(f"{base}.{name}"), node)
            if fq in ATTR_SETTERS:
                w.report_all(w.c.writes(f"{base}.{name}"), node)
        if fq in ATTR_SETTERS:
            w.report_all(w.c.write_attrs.get(name, ()), node)
    entry = w.c.checks.get("dynamic-attribute")
    if entry is None or fq not in entry[1].calls:
        return
    hit = entry[0]
    if not literal or node.keywords or any(isinstance(a, ast.Starred) for a in args):
        w.report(hit, node.lineno, node.col_offset, hit.message + " (the name is not a literal)")
    elif w.qual(args[0]) is not None:
        w.report(hit, node.lineno, node.col_offset, hit.message + " (the target is a module or builtin)")


def _native_call(w: Walker, node: ast.Call, spec: tuple[tuple[int, ...], tuple[str, ...]]) -> None:
    positions, keywords = spec
    values: list[ast.expr] = [node.args[i] for i in positions if i < len(node.args)]
    opaque = any(isinstance(a, ast.Starred) for a in node.args)
    for kw in node.keywords:
        if kw.arg is None:
            opaque = True
        elif kw.arg in keywords:
            values.append(kw.value)
    for value in values:
        pieces = w.strings_of(value)
        if pieces is None:
            opaque = True
            continue
        for hit, line, message in native.scan(pieces, w.c):
            w.report(hit, line, 0, message)
    entry = w.c.checks.get("native-opaque-source")
    if opaque and entry is not None:
        w.report(entry[0], node.lineno, node.col_offset)


def on_call(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.Call)
    func = node.func
    fq = w.qual(func)
    if fq is not None:
        if fq in GETATTR or fq in ATTR_SETTERS:
            _attr_builtins(w, node, fq)
        spec = w.c.native_calls.get(fq)
        if spec is not None:
            _native_call(w, node, spec)
    elif isinstance(func, ast.Subscript):
        if isinstance(func.value, ast.Name):
            w.launched.add(func.value.id)
        entry = w.c.checks.get("broad-except-launch")
        if ctx & TRY and entry is not None:
            w.report(entry[0], node.lineno, node.col_offset)
    elif isinstance(func, ast.Attribute) and w.qual(func.value) is None:
        hits = w.c.methods_anywhere.get(func.attr, [])
        if not ctx & JIT:
            hits = hits + w.c.methods.get(func.attr, [])
        w.report_all(hits, func)
    return ctx & ~INNER


def on_function(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    if any(w.is_jit(d) for d in node.decorator_list):
        w.jit_defs[node.name] = node.lineno
        return ctx | JIT
    return ctx


def on_assign(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.Assign)
    for target in node.targets:
        w.check_write(target)
        w.bind(target, node.value)
    return ctx


def on_ann_assign(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.AnnAssign)
    w.check_write(node.target)
    if node.value is not None:
        w.bind(node.target, node.value)
    return ctx


def _operator(w: Walker, op: ast.operator, node: ast.AST, ctx: int) -> None:
    if not ctx & JIT:
        hits = w.c.operators.get(type(op).__name__)
        if hits:
            w.report_all(hits, node)


def on_aug_assign(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.AugAssign)
    w.check_write(node.target)
    _operator(w, node.op, node, ctx)
    target = node.target
    if isinstance(target, ast.Name) and target.id in w.strings and isinstance(node.op, ast.Add):
        more = w.strings_of(node.value)
        if more is None:
            del w.strings[target.id]
        else:
            w.strings[target.id] = w.strings[target.id] + more
    return ctx


def on_named_expr(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.NamedExpr)
    w.bind(node.target, node.value)
    return ctx


def on_delete(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.Delete)
    for target in node.targets:
        w.check_write(target)
    return ctx


def on_binop(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.BinOp)
    _operator(w, node.op, node, ctx)
    return ctx & ~INNER


def _broad(w: Walker, handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(w.qual(t) in BROAD for t in types)


def on_try(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.Try | ast.TryStar)
    if "broad-except-launch" in w.c.checks and any(_broad(w, h) for h in node.handlers):
        return ctx | TRY
    return ctx


HANDLERS: dict[type[ast.AST], Handler] = {
    ast.Import: on_import,
    ast.ImportFrom: on_import,
    ast.Name: on_name,
    ast.Attribute: on_attribute,
    ast.Call: on_call,
    ast.FunctionDef: on_function,
    ast.AsyncFunctionDef: on_function,
    ast.Assign: on_assign,
    ast.AnnAssign: on_ann_assign,
    ast.AugAssign: on_aug_assign,
    ast.NamedExpr: on_named_expr,
    ast.Delete: on_delete,
    ast.BinOp: on_binop,
    ast.Try: on_try,
    ast.TryStar: on_try,
}
