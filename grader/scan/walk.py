"""The walker as its handlers and checks see it: a Protocol, and the walk's shared state.

:class:`grader.scan.python_ast.Walker` walks a module and hands each node to a handler
(:mod:`grader.scan.handlers`) and to the attribute checks (:mod:`grader.scan.attributes`).
They take the walker typed as :class:`Walker` here, so that neither imports the module that
imports them (mypy checks that the real walker has every member listed).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Protocol

from grader.scan.matchers import Compiled, Hit
from grader.scan.policy import Rule

Pieces = list[tuple[str, int]]


@dataclass
class Pending:
    """What the walk learns about attributes: names the file defines, and the uses that
    are allowed only if the file defines them (decided once the whole file is seen, since
    a method may use ``self.block`` above the ``__init__`` that assigns it)."""

    own: set[str] = field(default_factory=set)
    uses: list[tuple[str, int, int, bool]] = field(default_factory=list)  # name, line, col, kernel
    # Names bound to a value somewhere (a parameter, an assignment that is not a module
    # alias, a loop or except target ...): the alias table has no scopes, so a module alias
    # of the same name (``import math as out``; ``def launch(x, y, out)``) proves nothing.
    values: set[str] = field(default_factory=set)
    alias_targets: set[int] = field(default_factory=set)  # id() of `t` in `t = torch`
    through_alias: list[tuple[str, str, int, int, bool]] = field(default_factory=list)


class Walker(Protocol):
    """What handlers and checks use of the walk: its policy, tables, findings and lookups."""

    c: Compiled
    strings: dict[str, Pieces]
    jit_defs: dict[str, int]
    unknown_jit: dict[str, tuple[int, int, str]]
    launched: set[str]
    callees: set[int]
    alias_values: set[int]
    format_calls: set[int]
    kernel_calls: set[int]
    defined_once: dict[str, ast.FunctionDef] | None
    tree: ast.Module | None
    dunder_strings: tuple[Hit, Rule] | None
    attributes: Pending

    def report(self, hit: Hit, line: int, col: int = 0, message: str | None = None) -> None: ...

    def report_all(self, hits: tuple[Hit, ...] | list[Hit], node: ast.AST) -> None: ...

    def allowlisted(self, q: str, node: ast.Name | ast.Attribute,
                    builtin: bool | None = None) -> None: ...

    def is_local(self, node: ast.AST) -> bool: ...

    def qual(self, node: ast.AST) -> str | None: ...

    def is_jit(self, expr: ast.AST) -> bool: ...

    def bind_import(self, node: ast.Import | ast.ImportFrom) -> list[str]: ...

    def bind(self, target: ast.AST, value: ast.AST | None) -> None: ...

    def strings_of(self, node: ast.AST) -> Pieces | None: ...

    def check_write(self, target: ast.AST) -> None: ...
