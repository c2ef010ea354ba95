"""Python scanner: one iterative walk over the candidate's AST.

The walk resolves names the way the interpreter would bind them, to the extent a static
pass can: ``import x as y``, ``from x import y as z``, simple assignments
(``s = os.system``, ``f = getattr``), ``getattr(mod, "literal")`` and
``__import__("literal")``. Rules then match dotted names, not text: a comment, docstring
or string literal that mentions ``os.system`` is never a finding.

Scope is deliberately ignored (one alias table for the whole file): a binding inside a
function is visible everywhere. To keep that erring toward findings, builtins are never
shadowed (``def f(): exec = 1`` cannot hide a module-level ``exec``) and an alias of
something a rule cares about survives a later rebinding to plain data. The one place that
needs scopes, the allow-list's builtins (``def launch(input, out)``), asks
:mod:`grader.scan.scopes`, which only trusts function locals.
"""

from __future__ import annotations

import ast

from grader.report.model import Finding
from grader.scan import attributes
from grader.scan.handlers import HANDLERS, INNER, TRY
from grader.scan.matchers import Compiled, Hit
from grader.scan.names import ATTR_SETTERS, BUILTIN_NAMES, GETATTR, IMPORTERS, JIT_DECORATORS
from grader.scan.scopes import shadowed_loads
from grader.scan.walk import Pending, Pieces


class Walker:
    """Scans one parsed module against one compiled policy; call :meth:`run`."""

    def __init__(self, source: str, compiled: Compiled, filename: str) -> None:
        self.lines = source.splitlines()
        self.c = compiled
        self.filename = filename
        self.aliases: dict[str, str] = {}
        self.strings: dict[str, Pieces] = {}
        self.findings: list[Finding] = []
        self.seen: set[tuple[str, int]] = set()
        self.jit_defs: dict[str, int] = {}
        # Functions decorated ``@X.jit`` (autotune, heuristics) where X is not Triton:
        # name -> (line, col, why it is not Triton's).
        self.unknown_jit: dict[str, tuple[int, int, str]] = {}
        self.launched: set[str] = set()
        # id()s of nodes: callees of a call, values of a plain alias assignment, .format
        # attributes already judged with their call. The tree outlives the walk.
        self.callees: set[int] = set()
        self.alias_values: set[int] = set()
        self.format_calls: set[int] = set()
        self.kernel_calls: set[int] = set()  # desc.load([off]) in kernels: Triton's
        self.defined_once: dict[str, ast.FunctionDef] | None = None  # built on first use
        self.dunder_strings = compiled.checks.get("dunder-string")
        self.tree: ast.Module | None = None
        self._shadowed: set[int] | None = None
        self.attributes = Pending()

    # -- findings -----------------------------------------------------------------------
    def report(self, hit: Hit, line: int, col: int = 0, message: str | None = None) -> None:
        if (hit.rule, line) in self.seen:
            return
        self.seen.add((hit.rule, line))
        snippet = self.lines[line - 1].strip()[:200] if 0 < line <= len(self.lines) else ""
        self.findings.append(Finding(
            rule=hit.rule, severity=hit.severity, message=message or hit.message,
            line=line, col=col, snippet=snippet, file=self.filename,
        ))

    def report_all(self, hits: tuple[Hit, ...] | list[Hit], node: ast.AST) -> None:
        for hit in hits:
            self.report(hit, getattr(node, "lineno", 1), getattr(node, "col_offset", 0))

    def allowlisted(self, q: str, node: ast.Name | ast.Attribute, builtin: bool | None = None) -> None:
        """Report ``q`` (the whole dotted name at ``node``) unless the allow-list has it."""
        allow = self.c.allow
        assert allow is not None
        if builtin is None:
            builtin = q.split(".", 1)[0] in BUILTIN_NAMES
        denial = allow.check(q, builtin)
        if denial is None:
            if builtin or not allow.is_module(q) or id(node) in self.alias_values \
                    or isinstance(node.ctx, ast.Del):
                return
            denial = allow.value_denial(q)
        elif builtin and self.is_local(node):
            return
        self.report(Hit(denial.rule, "deny", denial.message), node.lineno, node.col_offset)

    def is_local(self, node: ast.AST) -> bool:
        """The root name of a dotted name is a function's own local (so not a builtin)."""
        while isinstance(node, ast.Attribute):
            node = node.value
        if not isinstance(node, ast.Name) or self.tree is None:
            return False
        if self._shadowed is None:
            self._shadowed = shadowed_loads(self.tree, BUILTIN_NAMES)
        return id(node) in self._shadowed

    # -- name resolution ----------------------------------------------------------------
    def qual(self, node: ast.AST) -> str | None:
        """Dotted name an expression stands for, or None when it is not a module path."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            base = self.aliases.get(node.id)
            if base is None:
                if node.id not in BUILTIN_NAMES:
                    return None
                base = node.id
        elif isinstance(node, ast.Call):
            base = self.call_value(node)
            if base is None:
                return None
        else:
            return None
        parts.reverse()
        return ".".join((base, *parts)) if parts else base

    def call_value(self, call: ast.Call) -> str | None:
        func = self.qual(call.func)
        if func is None or not call.args or not _is_str(call.args[0] if func in IMPORTERS
                                                        else call.args[-1]):
            return None
        if func in IMPORTERS:
            return call.args[0].value  # type: ignore[attr-defined,no-any-return]
        if func in GETATTR and len(call.args) == 2:
            base = self.qual(call.args[0])
            return f"{base}.{call.args[1].value}" if base else None  # type: ignore[attr-defined]
        return None

    def is_jit(self, expr: ast.AST) -> bool:
        while isinstance(expr, ast.Call):
            expr = expr.func
        return self.qual(expr) in JIT_DECORATORS

    # -- the walk -----------------------------------------------------------------------
    def run(self, tree: ast.Module) -> list[Finding]:
        self.tree = tree
        # Module-level imports first: a function body may use a name imported below it.
        # Imports inside functions are bound in order during the walk.
        top: list[ast.stmt] = list(tree.body)
        while top:
            stmt = top.pop()
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                self.bind_import(stmt)
            elif isinstance(stmt, ast.If | ast.Try | ast.TryStar | ast.With):
                top.extend(stmt.body)
                top.extend(getattr(stmt, "orelse", []))
                top.extend(s for h in getattr(stmt, "handlers", []) for s in h.body)
        stack: list[tuple[ast.AST, int]] = [(tree, 0)]
        handlers = HANDLERS
        fields_of = _FIELDS
        while stack:
            node, ctx = stack.pop()
            kind = type(node)
            handler = handlers.get(kind)
            child_ctx = handler(self, node, ctx) if handler is not None else ctx & ~INNER
            if kind is ast.Attribute:
                stack.append((node.value, (ctx & ~INNER) | INNER))  # type: ignore[attr-defined]
                continue
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                _push_function(stack, node, ctx & ~INNER, child_ctx)  # type: ignore[arg-type]
                continue
            if child_ctx & TRY and (kind is ast.Try or kind is ast.TryStar):
                _push_try(stack, node, ctx & ~INNER)  # type: ignore[arg-type]
                continue
            fields = fields_of.get(kind)
            if fields is None:
                fields = fields_of[kind] = tuple(f for f in reversed(kind._fields) if f not in _SKIP)
            for field in fields:
                value = getattr(node, field, None)
                if type(value) is list:
                    for item in reversed(value):
                        if isinstance(item, ast.AST):
                            stack.append((item, child_ctx))
                elif isinstance(value, ast.AST):
                    stack.append((value, child_ctx))
        self.finish()
        return self.findings

    def finish(self) -> None:
        attributes.finish(self)
        entry = self.c.checks.get("require-triton-kernel")
        if entry is None:
            return
        hit = entry[0]
        if not self.jit_defs and self.unknown_jit:
            line, col, why = min(self.unknown_jit.values())
            self.report(hit, line, col, f"{hit.message} ({why})")
        elif not self.jit_defs:
            self.report(hit, 1, 0, hit.message + " (no @triton.jit function is defined)")
        elif not self.launched & set(self.jit_defs):
            line = min(self.jit_defs.values())
            self.report(hit, line, 0, hit.message + " (the kernel is never launched as kernel[grid](...))")

    # -- bindings -----------------------------------------------------------------------
    def bind_import(self, node: ast.Import | ast.ImportFrom) -> list[str]:
        """Record aliases; return the dotted names the statement brings in."""
        names = []
        if isinstance(node, ast.Import):
            for a in node.names:
                names.append(a.name)
                if a.asname:
                    self._alias(a.asname, a.name)
                else:
                    top = a.name.split(".")[0]
                    self._alias(top, top)
            return names
        module = "." * node.level + (node.module or "")
        names.append(module)
        for a in node.names:
            full = f"{module}.{a.name}"
            names.append(full)
            if a.name != "*":
                self._alias(a.asname or a.name, full)
        return names

    def _sticky(self, q: str) -> bool:
        """An alias of something a rule cares about survives rebinding to plain data.

        Without scopes, ``def g(): f = 1`` would otherwise erase ``f = getattr`` at module
        level and hide every later ``f(torch, name)``; under an allow-list, ``t = 1`` would
        erase ``t = torch`` and hide ``t.os``.
        """
        return (bool(self.c.refs(q)) or q in GETATTR or q in ATTR_SETTERS or q in IMPORTERS
                or q in self.c.native_calls or (self.c.allow is not None and self.c.allow.is_module(q)))

    def _alias(self, name: str, target: str) -> None:
        if name not in BUILTIN_NAMES:  # never shadow a builtin (no scopes; err toward findings)
            self.aliases[name] = target

    def bind(self, target: ast.AST, value: ast.AST | None) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            values = value.elts if isinstance(value, ast.Tuple | ast.List) else None
            for i, t in enumerate(target.elts):
                self.bind(t, values[i] if values and i < len(values) else None)
            return
        if not isinstance(target, ast.Name):
            return
        name = target.id
        q = self.qual(value) if isinstance(value, ast.Name | ast.Attribute | ast.Call) else None
        if name in BUILTIN_NAMES:
            pass  # never shadow a builtin: the table has no scopes (see module docstring)
        elif q is not None:
            self.aliases[name] = q
        elif name in self.aliases and not self._sticky(self.aliases[name]):
            del self.aliases[name]
        pieces = self.strings_of(value) if value is not None else None
        if pieces is not None:
            self.strings[name] = pieces
        else:
            self.strings.pop(name, None)
        if value is not None and isinstance(value, ast.Call) and self.is_jit(value.func):
            self.jit_defs[name] = target.lineno

    def strings_of(self, node: ast.AST) -> Pieces | None:
        """String literals an expression evaluates to, or None when it is not static."""
        if isinstance(node, ast.Constant):
            return [(node.value, node.lineno)] if isinstance(node.value, str) else []
        if isinstance(node, ast.JoinedStr):
            if all(isinstance(v, ast.Constant) for v in node.values):
                return [("".join(str(v.value) for v in node.values  # type: ignore[attr-defined]
                                 ), node.lineno)]
            return None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.strings_of(node.left), self.strings_of(node.right)
            if left is None or right is None:
                return None
            both = left + right
            return [("".join(t for t, _ in both), both[0][1])] if both else []
        if isinstance(node, ast.List | ast.Tuple):
            out: Pieces = []
            for elt in node.elts:
                sub = self.strings_of(elt)
                if sub is None:
                    return None
                out.extend(sub)
            return out
        if isinstance(node, ast.Name):
            return self.strings.get(node.id)
        return None

    def check_write(self, target: ast.AST) -> None:
        node = target
        while isinstance(node, ast.Subscript | ast.Starred):
            node = node.value
        if isinstance(node, ast.Tuple | ast.List):
            for elt in node.elts:
                self.check_write(elt)
            return
        probe = node
        while isinstance(probe, ast.Attribute | ast.Subscript):
            if isinstance(probe, ast.Attribute):
                self.report_all(self.c.write_attrs.get(probe.attr, ()), target)
            probe = probe.value
        if isinstance(node, ast.Attribute):
            q = self.qual(node)
            if q is not None:
                self.report_all(self.c.writes(q), target)


# Child fields never worth visiting: expression contexts and operator singletons.
_SKIP = frozenset({"ctx", "op", "ops", "type_comment", "type_ignores"})
_FIELDS: dict[type[ast.AST], tuple[str, ...]] = {}


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _push_function(stack: list[tuple[ast.AST, int]],
                   node: ast.FunctionDef | ast.AsyncFunctionDef, outer: int, inner: int) -> None:
    """Only the body is inside the function: decorators (@triton.heuristics lambdas, which
    get the launch's tensors), defaults and annotations run where the ``def`` is."""
    stack.extend((item, inner) for item in reversed(node.body))
    if node.returns is not None:
        stack.append((node.returns, outer))
    stack.append((node.args, outer))
    stack.extend((item, outer) for item in reversed(getattr(node, "type_params", [])))
    stack.extend((item, outer) for item in reversed(node.decorator_list))


def _push_try(stack: list[tuple[ast.AST, int]], node: ast.Try | ast.TryStar, ctx: int) -> None:
    for part, flag in ((node.finalbody, 0), (node.orelse, 0), (node.handlers, 0), (node.body, TRY)):
        for item in reversed(part):
            stack.append((item, ctx | flag))

