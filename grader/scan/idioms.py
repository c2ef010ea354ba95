"""Modern Triton idioms the scan must read correctly, and the one it must confine.

* Tensor descriptors (``desc = tl.make_tensor_descriptor(...)``, or a host
  ``TensorDescriptor`` argument) move blocks with ``desc.load([off])``: inside a
  ``@triton.jit`` body a method called on a value with one list or tuple display and
  nothing else is Triton's, not file access. The rules that list the name in
  ``kernel_calls`` (``file-access-method``: ``load``) do not match it there. Every file
  reader named ``load`` (``torch.load``, ``numpy.load``, ``pickle.load``, a YAML or JSON
  loader, ``cpp_extension.load``) needs a path, a file object or a name as its first
  argument, so a list display fails it; a module path the scan resolves (``torch.load``)
  is never exempt, and any other call shape stays denied.
* ``collections.namedtuple("P", ["x", "y"])`` and ``typing.NamedTuple("P", [("x", T)])``
  define fields the way a class body does: under an allow-list they count as the file's
  own attribute names (unless a tensor, storage or frame has them, as for a class).
* ``triton.set_allocator(alloc)`` (``plain-allocator``): Triton calls the allocator inside
  its launch, where the runner has swapped the judge's tensors in, so it may only be a
  lambda or a function defined once in the file, undecorated, without defaults, whose body
  is one ``return`` of an allocation listed in the rule's ``allow`` (``torch.empty``),
  called with its own parameters, constants and ``torch`` names (dtypes) only: it can read
  no global, call nothing else, keep nothing. ``triton.set_allocator`` is never a value.
"""

from __future__ import annotations

import ast
import re

from grader.scan.attributes import definable
from grader.scan.matchers import Hit
from grader.scan.policy import Rule
from grader.scan.walk import Walker

NAMEDTUPLES = frozenset({"collections.namedtuple", "typing.NamedTuple"})
_FIELD_SPLIT = re.compile(r"[\s,]+")


def kernel_call_hits(w: Walker, node: ast.Attribute, hits: tuple[Hit, ...]) -> tuple[Hit, ...]:
    """``hits`` less the rules that leave this attribute to Triton in a descriptor call."""
    if not hits or id(node) not in w.kernel_calls:
        return hits
    exempt = w.c.kernel_calls.get(node.attr, frozenset())
    return tuple(h for h in hits if h.rule not in exempt)


def on_call(w: Walker, node: ast.Call, in_kernel: bool) -> None:
    """Note descriptor calls in kernels and namedtuple fields; check set_allocator."""
    func = node.func
    if in_kernel and isinstance(func, ast.Attribute) and func.attr in w.c.kernel_calls \
            and _descriptor_call(w, node, func):
        w.kernel_calls.add(id(func))
    fq = w.qual(func)
    if fq is None:
        return
    if fq in NAMEDTUPLES and w.c.allow is not None:
        w.attributes.own |= {f for f in _fields(node) if definable(f)}
    entry = w.c.checks.get("plain-allocator")
    if entry is not None and fq in entry[1].calls:
        why = _allocator_problem(w, node, entry[1])
        if why is not None:
            hit = entry[0]
            w.report(hit, node.lineno, node.col_offset, f"{hit.message} ({why})")


def _descriptor_call(w: Walker, node: ast.Call, func: ast.Attribute) -> bool:
    return (w.qual(func.value) is None and len(node.args) == 1 and not node.keywords
            and isinstance(node.args[0], ast.List | ast.Tuple))


def _fields(node: ast.Call) -> list[str]:
    """Field names given as literals: ``["x", "y"]``, ``"x y"``, ``[("x", T), ...]``."""
    spec: ast.expr | None = node.args[1] if len(node.args) > 1 else None
    for kw in node.keywords:
        if kw.arg in ("field_names", "fields"):
            spec = kw.value
    if isinstance(spec, ast.Constant) and isinstance(spec.value, str):
        return [f for f in _FIELD_SPLIT.split(spec.value) if f]
    out: list[str] = []
    for elt in spec.elts if isinstance(spec, ast.List | ast.Tuple) else []:
        if isinstance(elt, ast.Tuple | ast.List) and elt.elts:
            elt = elt.elts[0]
        if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
            out.append(elt.value)
    return out


def _allocator_problem(w: Walker, node: ast.Call, rule: Rule) -> str | None:
    """Why the allocator handed to set_allocator is not a plain allocation; None if it is."""
    shape = "give it a function that only returns torch.empty(size, device=..., dtype=...)"
    if len(node.args) != 1 or node.keywords:
        return f"one positional allocator expected; {shape}"
    arg = node.args[0]
    fn: ast.Lambda | ast.FunctionDef | None = None
    if isinstance(arg, ast.Lambda):
        fn = arg
    elif isinstance(arg, ast.Name):
        fn = _defined_once(w, arg.id)
    if fn is None:
        return f"the allocator is not a lambda or a function defined once in the file; {shape}"
    params = fn.args
    if params.defaults or params.kw_defaults or params.vararg or params.kwarg:
        return f"the allocator has defaults or * parameters; {shape}"
    if isinstance(fn, ast.FunctionDef):
        body = fn.body[1:] if _is_docstring(fn.body[0]) else fn.body
        if fn.decorator_list or len(body) != 1 or not isinstance(body[0], ast.Return):
            return f"the allocator does more than return an allocation; {shape}"
        value = body[0].value
    else:
        value = fn.body
    names = {a.arg for a in (*params.posonlyargs, *params.args, *params.kwonlyargs)}
    if not isinstance(value, ast.Call) or w.qual(value.func) not in rule.allow:
        return f"the allocator returns something else than {', '.join(rule.allow)}; {shape}"
    for part in (*value.args, *(k.value for k in value.keywords)):
        if not _plain(w, part, names):
            return (f"the allocation's argument {ast.unparse(part)[:40]!r} is not a parameter, "
                    f"a constant or a torch name; {shape}")
    return None


def _plain(w: Walker, node: ast.expr, params: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name) and node.id in params:
        return True
    q = w.qual(node) if isinstance(node, ast.Attribute) else None
    return q is not None and q.startswith("torch.") and w.c.refs(q) == ()


def _is_docstring(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str))


def _bound_name(node: ast.AST) -> str | None:
    """The name ``node`` binds other than by a ``def`` of a plain function, if any."""
    if isinstance(node, ast.AsyncFunctionDef | ast.ClassDef):
        return node.name
    if isinstance(node, ast.Name):
        return None if isinstance(node.ctx, ast.Load) else node.id
    if isinstance(node, ast.arg):
        return node.arg
    if isinstance(node, ast.alias):
        return node.asname or node.name.split(".")[0]
    if isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar):
        return node.name
    if isinstance(node, ast.MatchMapping):
        return node.rest
    return None


def _defined_once(w: Walker, name: str) -> ast.FunctionDef | None:
    """The one ``def name`` of the file, when nothing else binds ``name`` anywhere (one
    walk of the tree per file, however many set_allocator calls it has)."""
    if w.defined_once is None:
        defs: dict[str, list[ast.FunctionDef]] = {}
        other: set[str] = set()
        for node in ast.walk(w.tree) if w.tree is not None else ():
            if isinstance(node, ast.FunctionDef):
                defs.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.Global | ast.Nonlocal):
                other.update(node.names)
            else:
                bound = _bound_name(node)
                if bound is not None:
                    other.add(bound)
        w.defined_once = {n: d[0] for n, d in defs.items() if len(d) == 1 and n not in other}
    return w.defined_once.get(name)
