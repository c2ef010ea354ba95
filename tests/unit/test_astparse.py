"""Every parse in kgrader's host code goes through one lock (CPython 3.11's AST constructor
is not safe across threads: python/cpython#106905, seen in CI)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from grader import astparse
from grader.costexpr import compile_expr
from grader.scan import load_policy, scan_source

GRADER = Path(__file__).resolve().parents[2] / "grader"


def test_no_host_module_calls_ast_parse_directly() -> None:
    direct = [f"{p.relative_to(GRADER)}:{n}" for p in GRADER.rglob("*.py") if p.name != "astparse.py"
              for n, line in enumerate(p.read_text().splitlines(), 1)
              if re.search(r"\bast\.parse\(|PyCF_ONLY_AST", line)]
    assert direct == []


def test_cost_expressions_and_the_scan_parse_under_the_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    real = ast.parse

    def spy(*a: Any, **k: Any) -> Any:
        seen.append(astparse._LOCK.locked())
        return real(*a, **k)

    monkeypatch.setattr(ast, "parse", spy)
    compile_expr("2*M*N")
    scan_source("def launch(x):\n    return x\n", load_policy("default"))
    assert seen and all(seen)
