"""Per-node-type handlers of the Python walker (one small function per AST node kind).

Each handler gets the walker, the node and the context bits of its parent, reports what
the policy matches, updates bindings, and returns the context for the node's children.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from grader.scan import attributes, idioms, native
from grader.scan.formats import walking_fields
from grader.scan.matchers import Hit
from grader.scan.names import ATTR_SETTERS, BUILTIN_NAMES, GETATTR, JIT_DECORATORS, is_dunder
from grader.scan.walk import Walker

__all__ = ["BUILTIN_NAMES", "HANDLERS"]
_JIT_NAMES = frozenset(q.rsplit(".", 1)[1] for q in JIT_DECORATORS)
BROAD = frozenset({"Exception", "BaseException"})
FORMAT_METHODS = frozenset({"format", "format_map"})
_DUNDER_TOKEN = re.compile(r"__[A-Za-z0-9]\w*?__")

# Context bits: inside a @triton.jit body; inside the body of a catch-all try; the node is
# the inner part of a dotted chain (only the whole chain ``a.b.c`` is matched, once); the
# node is a string statement whose value is discarded (a docstring); directly in a class
# body (where a binding is also a class attribute, reachable as C.name).
JIT, TRY, INNER, DISCARD, CLASS = 1, 2, 4, 8, 16

Handler = Callable[[Walker, ast.AST, int], int]


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def on_import(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.Import | ast.ImportFrom)
    names = w.bind_import(node)
    allow = w.c.allow
    for i, name in enumerate(names):
        hits = w.c.refs(name)
        w.report_all(hits, node)
        if allow is not None and not _denies(hits):
            if i == 0 and isinstance(node, ast.ImportFrom):
                denial = allow.importable(name)  # the module part binds nothing
            else:
                denial = allow.check(name, builtin=False)
            if denial is not None:
                w.report(Hit(denial.rule, "deny", denial.message), node.lineno, node.col_offset)
    if allow is not None and ctx & CLASS:
        # `class C: import torch as m` makes C.m a module that no alias tracks.
        for alias in node.names:
            bound = _bound_module(node, alias)
            if allow.is_module(bound):
                denial = allow.value_denial(bound)
                w.report(Hit(denial.rule, "deny", denial.message + " (a class attribute)"),
                         node.lineno, node.col_offset)
    return ctx


def _bound_module(node: ast.Import | ast.ImportFrom, alias: ast.alias) -> str:
    if isinstance(node, ast.ImportFrom):
        return f"{'.' * node.level}{node.module or ''}.{alias.name}"
    return alias.name if alias.asname else alias.name.split(".")[0]


def _denies(hits: tuple[Hit, ...]) -> bool:
    return any(h.severity == "deny" for h in hits)


def _called_only(w: Walker, node: ast.Name | ast.Attribute, q: str) -> None:
    """callable-as-value, plain-allocator: getattr & co. and triton.set_allocator are only
    ever the callee of a call, never a value."""
    if id(node) not in w.callees:
        hit = w.c.as_value[q]
        w.report(hit, node.lineno, node.col_offset,
                 f"{hit.message} ({q} is passed, stored or aliased here)")


def _whole_name(w: Walker, node: ast.Name | ast.Attribute, q: str) -> None:
    """A complete dotted name (not the inner part of a longer one): refs, then allow-list."""
    hits = w.c.refs(q)
    w.report_all(hits, node)
    if w.c.allow is not None and not _denies(hits):
        w.allowlisted(q, node)


def on_name(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.Name)
    if isinstance(node.ctx, ast.Store):
        if w.c.allow is not None:
            attributes.on_binding(w, node)
        return ctx & ~INNER
    q = w.qual(node)
    if q is not None and q in w.c.as_value:
        _called_only(w, node, q)  # also as the base of getattr.__call__
    if not ctx & INNER:
        if q is not None:
            _whole_name(w, node, q)
        elif w.c.allow is not None and is_dunder(node.id) and isinstance(node.ctx, ast.Load):
            w.allowlisted(node.id, node, builtin=True)  # __file__, __class__ ...
    return ctx & ~INNER


def on_attribute(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.Attribute)
    hits = idioms.kernel_call_hits(w, node, w.c.attrs(node.attr))
    if hits:
        w.report_all(w.c.attrs_except(hits, lambda: w.qual(node)), node)
    if w.c.allow is not None:
        attributes.check(w, node, bool(ctx & JIT))
    if node.attr in FORMAT_METHODS and id(node) not in w.format_calls:
        _format_template(w, node, None)
    if not ctx & INNER:
        q = w.qual(node)
        if q is not None:
            if q in w.c.as_value:
                _called_only(w, node, q)
            _whole_name(w, node, q)
    return ctx & ~INNER


def _format_template(w: Walker, method: ast.Attribute, call: ast.Call | None) -> None:
    """format-fields: ``TEMPLATE.format(...)`` only with a static template whose fields
    name no attribute or item (``{0.__globals__}``, ``{0[modules]}``)."""
    entry = w.c.checks.get("format-fields")
    if entry is None:
        return
    hit = entry[0]
    template: ast.expr | None = method.value
    if w.qual(method.value) == "str":  # str.format(TEMPLATE, ...)
        args = call.args if call is not None else []
        template = args[0] if args and not isinstance(args[0], ast.Starred) else None
    pieces = w.strings_of(template) if template is not None else None
    where = call if call is not None else method
    if pieces is None:
        why = "the template is not a static string, so its fields cannot be checked"
        w.report(hit, where.lineno, where.col_offset, f"{hit.message} ({why})")
        return
    for text, _line in pieces:
        bad = walking_fields(text)
        if bad:
            w.report(hit, where.lineno, where.col_offset,
                     f"{hit.message} (field {{{bad[0]}}} in {method.attr} template)")
            return


def _attr_builtins(w: Walker, node: ast.Call, fq: str) -> None:
    """getattr/setattr/delattr: dynamic names, module targets, literal dunder names."""
    args = node.args
    literal = len(args) >= 2 and _is_str(args[1])
    if literal:
        name = args[1].value  # type: ignore[attr-defined]
        base = w.qual(args[0])
        w.report_all(w.c.attrs_except(w.c.attrs(name),
                                      lambda: f"{base}.{name}" if base else None), node)
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
    w.callees.add(id(func))
    idioms.on_call(w, node, bool(ctx & JIT))
    if isinstance(func, ast.Attribute) and func.attr in FORMAT_METHODS:
        w.format_calls.add(id(func))
        _format_template(w, func, node)
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
    ctx &= ~CLASS
    on_binding(w, node, ctx)
    if any(w.is_jit(d) for d in node.decorator_list):
        w.jit_defs[node.name] = node.lineno
        return ctx | JIT
    for d in node.decorator_list:  # ``@trition.jit``: a kernel meant, a name that is no Triton
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Attribute) and target.attr in _JIT_NAMES:
            base, resolved = ast.unparse(target.value)[:60], w.qual(target.value)
            why = (f"{base} is {resolved}, not triton" if resolved else
                   f"{base} is not defined or imported (a misspelt triton?)")
            w.unknown_jit.setdefault(node.name, (d.lineno, d.col_offset,
                                                 f"@{base}.{target.attr} on {node.name}() is "
                                                 f"not a Triton decorator: {why}"))
    return ctx


def on_class(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.ClassDef)
    if w.c.allow is not None:
        attributes.on_class(w, node)
    return (ctx & ~INNER) | CLASS


def _alias_value(w: Walker, targets: list[ast.expr], value: ast.expr | None, ctx: int) -> None:
    """``t = torch``: the value becomes a tracked alias, not a module leaving sight. Not in
    a class body, where ``m = torch`` is also the attribute ``C.m`` that no alias tracks."""
    if ctx & CLASS:
        return
    if isinstance(value, ast.Name | ast.Attribute) and all(isinstance(t, ast.Name) for t in targets):
        w.alias_values.add(id(value))
        attributes.note_alias(w, targets, value)


def on_assign(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.Assign)
    _alias_value(w, node.targets, node.value, ctx)
    for target in node.targets:
        w.check_write(target)
        w.bind(target, node.value)
    return ctx


def on_ann_assign(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.AnnAssign)
    _alias_value(w, [node.target], node.value, ctx)
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
    _alias_value(w, [node.target], node.value, ctx)
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


def on_expr(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.Expr)
    value = node.value
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return ctx | DISCARD  # a docstring or bare string: its value is thrown away
    return ctx & ~DISCARD


def on_constant(w: Walker, node: ast.AST, ctx: int) -> int:
    """dunder-string: ``"__globals__"`` as data is an attribute walk waiting for a getter."""
    assert isinstance(node, ast.Constant)
    entry = w.dunder_strings
    if entry is None or ctx & DISCARD:
        return ctx
    value = node.value
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str) or "__" not in value:
        return ctx
    hit, rule = entry
    for token in _DUNDER_TOKEN.findall(value):
        if token not in rule.allow:
            w.report(hit, node.lineno, node.col_offset, f"{hit.message} ({token!r})")
            break
    return ctx


def on_binding(w: Walker, node: ast.AST, ctx: int) -> int:
    """Parameters, except and match captures: names bound to values (for the allow-list)."""
    if w.c.allow is not None:
        attributes.on_binding(w, node)
    return ctx & ~INNER


def on_match_class(w: Walker, node: ast.AST, ctx: int) -> int:
    assert isinstance(node, ast.MatchClass)
    attributes.on_match_class(w, node, bool(ctx & JIT))
    return ctx & ~INNER


HANDLERS: dict[type[ast.AST], Handler] = {
    ast.arg: on_binding,
    ast.ExceptHandler: on_binding,
    ast.MatchAs: on_binding,
    ast.MatchStar: on_binding,
    ast.MatchMapping: on_binding,
    ast.MatchClass: on_match_class,
    ast.Import: on_import,
    ast.ImportFrom: on_import,
    ast.Name: on_name,
    ast.Attribute: on_attribute,
    ast.Call: on_call,
    ast.FunctionDef: on_function,
    ast.AsyncFunctionDef: on_function,
    ast.ClassDef: on_class,
    ast.Assign: on_assign,
    ast.AnnAssign: on_ann_assign,
    ast.AugAssign: on_aug_assign,
    ast.NamedExpr: on_named_expr,
    ast.Delete: on_delete,
    ast.BinOp: on_binop,
    ast.Try: on_try,
    ast.TryStar: on_try,
    ast.Expr: on_expr,
    ast.Constant: on_constant,
}
