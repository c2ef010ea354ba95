"""Cost-model expressions: a tiny, safe arithmetic evaluator over dimension names.

A task's ``cost_model`` says, as arithmetic on its dimension names, how many bytes a call
moves and how many flops it does. Only numbers, names, + - * / // % **, unary signs and
``log2``/``ceil``/``max``/``min`` are accepted; nothing is ever passed to ``eval``.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from grader.astparse import parse_expression

_BINOPS: dict[type[ast.operator], Any] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}
_FUNCS: dict[str, Any] = {"log2": math.log2, "ceil": math.ceil, "max": max, "min": min}


def compile_expr(expr: str) -> ast.expr:
    if len(expr) > 500:
        raise ValueError("expression longer than 500 characters")
    try:
        tree = parse_expression(expr)
    except SyntaxError as e:
        raise ValueError(f"not an arithmetic expression: {expr!r} ({e.msg})") from None
    for node in ast.walk(tree):
        ok = isinstance(node, ast.Expression | ast.BinOp | ast.UnaryOp | ast.Constant | ast.Name
                        | ast.Load | ast.USub | ast.UAdd | ast.Call | ast.operator)
        if isinstance(node, ast.Constant) and not isinstance(node.value, int | float):
            ok = False
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCS):
            ok = False
        if not ok:
            raise ValueError(f"unsupported element {type(node).__name__} in {expr!r}")
    return tree.body


def eval_expr(expr: str, dims: dict[str, int]) -> float:
    """Evaluate a cost-model expression over dimension values."""

    def ev(node: ast.expr) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id not in dims:
                raise ValueError(f"unknown dimension {node.id!r} in {expr!r}")
            return float(dims[node.id])
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            return float(_BINOPS[type(node.op)](ev(node.left), ev(node.right)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return float(_FUNCS[node.func.id](*[ev(a) for a in node.args]))
        raise ValueError(f"unsupported element in {expr!r}")

    return ev(compile_expr(expr))
