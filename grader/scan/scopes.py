"""Which loads of a builtin's name are really a function's own local variable.

The walker's alias table has no scopes (see :mod:`grader.scan.python_ast`), so on its own
``def launch(input, out): n = input.numel()`` reads the builtin ``input``. The allow-list
would deny that; this pass finds the loads that cannot be the builtin.

Only function scopes count, because only there is the rule airtight: a name bound anywhere
in a function body (a parameter, an assignment, an import, a ``for`` or ``with`` target
...) is local to the whole body, and a load of it reads the local or raises; it never
falls back to builtins. Nested functions see their enclosing functions' locals the same
way. Module and class bodies do fall back to builtins when a binding has not run yet (or
sits in a branch not taken), so their bindings never shadow. Where the analysis is unsure
(``global``, a walrus inside a comprehension) it leaves the name unshadowed: that errs
toward a finding, never toward a miss.
"""

from __future__ import annotations

import ast

_FUNCTION = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSION = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_NEW_SCOPE = (*_FUNCTION, ast.ClassDef, *_COMPREHENSION)

Scope = frozenset[str]


def shadowed_loads(tree: ast.Module, names: frozenset[str]) -> set[int]:
    """``id()`` of every ``Name`` load of one of ``names`` that reads a function local."""
    out: set[int] = set()
    stack: list[tuple[ast.AST, Scope]] = [(tree, frozenset())]
    while stack:
        node, scope = stack.pop()
        if isinstance(node, ast.Name):
            if scope and node.id in scope and node.id in names:
                out.add(id(node))
            continue
        if isinstance(node, _FUNCTION):
            _push_function(stack, node, scope)
        elif isinstance(node, ast.ClassDef):
            _push_class(stack, node, scope)
        elif isinstance(node, _COMPREHENSION):
            _push_comprehension(stack, node, scope)
        else:
            stack.extend((child, scope) for child in ast.iter_child_nodes(node))
    return out


def _push_function(stack: list[tuple[ast.AST, Scope]],
                   node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, scope: Scope) -> None:
    args = node.args
    # Decorators, defaults and annotations run in the enclosing scope.
    outer: list[ast.AST] = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
    every_arg = [*args.posonlyargs, *args.args, *args.kwonlyargs,
                 *(a for a in (args.vararg, args.kwarg) if a is not None)]
    outer.extend(a.annotation for a in every_arg if a.annotation is not None)
    if not isinstance(node, ast.Lambda):
        outer.extend(node.decorator_list)
        if node.returns is not None:
            outer.append(node.returns)
    stack.extend((n, scope) for n in outer)
    body: list[ast.AST] = [node.body] if isinstance(node, ast.Lambda) else list(node.body)
    local = {a.arg for a in every_arg} | bound_in(body)
    declared_global = _globals_in(body)
    inner = (scope | local) - declared_global
    stack.extend((n, inner) for n in body)


def _push_class(stack: list[tuple[ast.AST, Scope]], node: ast.ClassDef, scope: Scope) -> None:
    stack.extend((n, scope) for n in (*node.decorator_list, *node.bases, *node.keywords))
    # A name bound in the class body is looked up class dict -> globals -> builtins there.
    inner = scope - bound_in(list(node.body))
    stack.extend((n, inner) for n in node.body)


def _push_comprehension(stack: list[tuple[ast.AST, Scope]], node: ast.expr, scope: Scope) -> None:
    generators: list[ast.comprehension] = node.generators  # type: ignore[attr-defined]
    targets: set[str] = set()
    for gen in generators:
        targets |= {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
    inner = scope | targets
    stack.append((generators[0].iter, scope))  # the first iterable runs outside
    for i, gen in enumerate(generators):
        if i:
            stack.append((gen.iter, inner))
        stack.extend((cond, inner) for cond in gen.ifs)
    elts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]  # type: ignore[attr-defined]
    stack.extend((e, inner) for e in elts)


def bound_in(body: list[ast.AST]) -> set[str]:
    """Names a block binds itself, without entering nested scopes (their names do count)."""
    bound: set[str] = set()
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store | ast.Del):
                bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
            todo.extend(node.decorator_list)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar | ast.MatchMapping):
            name = node.rest if isinstance(node, ast.MatchMapping) else node.name
            if name:
                bound.add(name)
            todo.extend(ast.iter_child_nodes(node))
        elif not isinstance(node, _NEW_SCOPE):
            todo.extend(ast.iter_child_nodes(node))
    return bound


def _globals_in(body: list[ast.AST]) -> set[str]:
    declared: set[str] = set()
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Global):
            declared.update(node.names)
        elif not isinstance(node, _NEW_SCOPE):
            todo.extend(ast.iter_child_nodes(node))
    return declared
