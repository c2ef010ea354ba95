"""The allow-list of attribute names on values: what is not listed is denied.

The op audit only sees torch's dispatcher; ``out.numpy()[:] = x.numpy() + y.numpy()``,
sums over ``x.tolist()``, ``x.item()`` loops, ``x.apply_(f)`` and storages read from files
(``x.untyped_storage().from_file(...)``) never dispatch. Python is untyped, so the scan
cannot tell a tensor from any other value; the sound rule is therefore about every value.
Outside ``@triton.jit`` bodies (decorators and defaults included: they run on the host),
an attribute of anything that is not a module or builtin name the scan resolves must be on
the policy's ``[allowlist] attributes`` (tensor metadata, views, the few methods a launcher
uses); inside them, on ``kernel_attributes`` (Triton's tensor and dtype API: under
TRITON_INTERPRET a kernel body is plain Python). A name the file defines itself (a class
field or method, an attribute it assigns) counts as listed unless tensors, storages or
frames have it too. A module alias whose name is also bound to a value (a parameter, an
assignment) counts as a value, since the alias table has no scopes; ``match`` class
patterns read attributes too and are checked the same way. Module-rooted names
(``torch.empty``, ``tl.load``) are otherwise the module allow-list's business
(:mod:`grader.scan.allowlist`).

A finding is ``attribute-not-allowed`` at the attribute's own line and column; the id
belongs to this mechanism, the lists are data.
"""

from __future__ import annotations

import ast

from grader.scan.allowlist import ATTRIBUTE_RULE
from grader.scan.foreign import FOREIGN_ATTRIBUTES
from grader.scan.matchers import Hit
from grader.scan.names import BUILTIN_NAMES, is_dunder
from grader.scan.scopes import bound_in
from grader.scan.walk import Walker

RULE = ATTRIBUTE_RULE


def definable(name: str) -> bool:
    """A definition in the file may allow this name: not a dunder, and no tensor, storage,
    array, frame ... has it (:data:`grader.scan.foreign.FOREIGN_ATTRIBUTES`), so that
    ``class C: tolist = 1`` cannot let ``x.tolist()`` through."""
    return not is_dunder(name) and name not in FOREIGN_ATTRIBUTES


def on_class(w: Walker, node: ast.ClassDef) -> None:
    """Names bound in a class body (fields, methods, enum members) are the file's own."""
    w.attributes.own |= bound_in(list(node.body))
    w.attributes.values.add(node.name)


def note_alias(w: Walker, targets: list[ast.expr], value: ast.expr | None) -> None:
    """``t = torch`` keeps ``t`` a module alias; any other binding of ``t`` is a value."""
    if isinstance(value, ast.Name | ast.Attribute) and w.qual(value) is not None:
        w.attributes.alias_targets.update(id(t) for t in targets if isinstance(t, ast.Name))


def on_binding(w: Walker, node: ast.AST) -> None:
    """A name bound to a value: a stored ``Name`` (unless an alias target), a parameter,
    an except or match capture, a function's name."""
    if isinstance(node, ast.Name):
        if id(node) not in w.attributes.alias_targets:
            w.attributes.values.add(node.id)
        return
    name = (node.arg if isinstance(node, ast.arg)
            else node.rest if isinstance(node, ast.MatchMapping)
            else getattr(node, "name", None))
    if isinstance(name, str):
        w.attributes.values.add(name)


def on_match_class(w: Walker, node: ast.MatchClass, in_kernel: bool) -> None:
    """``case object(numpy=f)`` reads the subject's attribute ``numpy`` (so the attribute
    rules of every policy apply to it); a positional sub-pattern reads whatever the class's
    ``__match_args__`` names (dataclasses set it), which the allow-list cannot see."""
    for attr, pattern in zip(node.kwd_attrs, node.kwd_patterns, strict=True):
        w.report_all(w.c.attrs(attr), pattern)  # every policy: dunder walks, file access
    allow = w.c.allow
    if allow is None:
        return
    allowed = allow.kernel_attributes if in_kernel else allow.attributes
    for attr, pattern in zip(node.kwd_attrs, node.kwd_patterns, strict=True):
        if allowed is not None and attr not in allowed:
            _use(w, attr, pattern.lineno, pattern.col_offset, in_kernel, allow.policy)
    builtin = w.qual(node.cls) in _SELF_MATCHING
    if allowed is not None and node.patterns and not builtin:
        why = (f"a class pattern with positional sub-patterns reads the attributes its "
               f"class's __match_args__ names; policy {allow.policy} allows keyword "
               "sub-patterns only, each checked as an attribute")
        w.report(Hit(RULE, "deny", why), node.lineno, node.col_offset)


# Builtin classes whose one positional sub-pattern is the subject itself (PEP 634).
_SELF_MATCHING = frozenset({"bool", "bytearray", "bytes", "dict", "float", "frozenset", "int",
                            "list", "set", "str", "tuple"})


def on_value(w: Walker, receiver: ast.expr) -> bool:
    """The receiver is a value, not a module or builtin path the scan resolves. A builtin's
    name that is a function's own local (``def launch(input, out)``) is a value too."""
    q = w.qual(receiver)
    if q is None:
        return True
    return q.split(".", 1)[0] in BUILTIN_NAMES and w.is_local(receiver)


def check(w: Walker, node: ast.Attribute, in_kernel: bool) -> None:
    """Note what ``node`` defines, then check its attribute on its receiver against the
    list for where it is: outside kernels, or inside (Triton's tensor API, since under
    TRITON_INTERPRET a kernel body is plain Python that could reach a global tensor)."""
    allow = w.c.allow
    if allow is None:
        return
    attr = node.attr
    if not isinstance(node.ctx, ast.Load):
        w.attributes.own.add(attr)  # self.block = ..., del obj.x
    allowed = allow.kernel_attributes if in_kernel else allow.attributes
    if allowed is None or attr in allowed:
        return
    # Point at the attribute's own name (the node starts where its receiver does).
    line = node.end_lineno or node.lineno
    col = node.end_col_offset - len(attr) if node.end_col_offset is not None else node.col_offset
    if on_value(w, node.value):
        _use(w, attr, line, col, in_kernel, allow.policy)
        return
    root: ast.expr = node.value
    while isinstance(root, ast.Attribute):
        root = root.value
    if isinstance(root, ast.Name):  # a module alias, unless the name is a value too
        w.attributes.through_alias.append((root.id, attr, line, col, in_kernel))


def _use(w: Walker, attr: str, line: int, col: int, in_kernel: bool, policy: str) -> None:
    if definable(attr):
        w.attributes.uses.append((attr, line, col, in_kernel))
    else:
        _deny(w, attr, line, col, in_kernel, policy)


def finish(w: Walker) -> None:
    """Decide what needed the whole file: uses of definable names the file did not define
    after all, and uses through a module alias whose name is also bound to a value."""
    allow = w.c.allow
    if allow is None:
        return
    state = w.attributes
    for root, attr, line, col, in_kernel in state.through_alias:
        if root in state.values:
            _use(w, attr, line, col, in_kernel, allow.policy)
    for attr, line, col, in_kernel in state.uses:
        if attr not in state.own:
            _deny(w, attr, line, col, in_kernel, allow.policy)


def _deny(w: Walker, attr: str, line: int, col: int, in_kernel: bool, policy: str) -> None:
    if in_kernel:
        why = (f".{attr} is not on policy {policy}'s list of attributes allowed on values "
               "inside @triton.jit functions (Triton's tensor and dtype API)")
    else:
        why = (f".{attr} is not on policy {policy}'s list of attributes allowed on values "
               "outside @triton.jit functions (metadata, views, allocation like the input)")
    if not definable(attr) and not is_dunder(attr):
        why += "; tensors, storages or frames have it, so a definition in the file does not count"
    w.report(Hit(RULE, "deny", why), line, col)
