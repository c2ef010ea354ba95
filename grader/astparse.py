"""``ast.parse`` for kgrader's threads.

CPython 3.11's AST constructor keeps its recursion counter in per-interpreter state, so
two threads parsing at once can trip ``SystemError: AST constructor recursion depth
mismatch`` (python/cpython#106905; seen in CI with eight evaluations in parallel, each
validating its task's cost expressions). The leaderboard and the conformance tests
evaluate in threads: every parse in kgrader goes through this one lock.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse_module(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse`` of a module, one thread at a time (SyntaxError, ValueError as usual)."""
    with _LOCK:
        return ast.parse(source, filename=filename)


def parse_expression(source: str) -> ast.Expression:
    """``ast.parse(mode="eval")``, one thread at a time."""
    with _LOCK:
        return ast.parse(source, mode="eval")
