"""Queries over the store: filters, shape ranges, text search, and the ranking order.

Every value a user or an agent gives reaches SQLite as a bound parameter. The only SQL
text built here comes from this module's own constants (column names, the comparison
operators of :data:`DIM_OPS`, table aliases, and one ``?`` per bound value); user text
never is. The FTS5 ``MATCH`` string is itself a small query language, so user text is
turned into a conjunction of quoted phrases (:func:`fts_match`): inside a phrase ``-``,
``*``, ``:``, ``^``, ``(``, ``NEAR``, ``AND``, ``OR`` and ``NOT`` are plain text, and a
double quote is doubled. ``LIKE`` patterns escape ``%``, ``_`` and ``\\``.

Ranking (best first), used by the CLI and by the agent tool:

1. the preferred task, then the number of preferred tags shared (the tool prefers its
   workspace's task and tags);
2. the preferred hardware (same device kind and name);
3. the text-search rank (FTS5 bm25: messages weigh more than diagnostics, diagnostics
   more than source), when a text was given;
4. passing before failing, and among passing ones the fastest median first;
5. the most recent first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from grader.errors import UsageError
from grader.experience.model import DimFilterError

__all__ = ["DIM_OPS", "DimFilter", "Query", "build_select", "fts_match", "like_pattern", "parse_dim"]

DIM_OPS: dict[str, str] = {">=": ">=", "<=": "<=", ">": ">", "<": "<", "=": "=", "==": "=", "!=": "!="}
MAX_TEXT_CHARS = 256
MAX_TERMS = 16
MAX_DIM_FILTERS = 8
MAX_LIMIT = 1000
_INT64 = (1 << 63) - 1
_NAME = r"([A-Za-z_][A-Za-z0-9_]{0,63})"
_NUM = r"(-?\d{1,19})"
_CMP_RE = re.compile(rf"^\s*{_NAME}\s*(>=|<=|==|!=|=|>|<)\s*{_NUM}\s*$")
_RANGE_RE = re.compile(rf"^\s*{_NAME}\s*=\s*{_NUM}\s*\.\.\s*{_NUM}\s*$")
_BOUNDS_RE = re.compile(rf"^\s*{_NUM}\s*(<=|<)\s*{_NAME}\s*(<=|<)\s*{_NUM}\s*$")
_SYNTAX = "use NAME OP INT (OP one of >= <= > < = !=), NAME=LO..HI, or LO<=NAME<=HI; e.g. 'N>=1024'"

Outcome = Literal["passed", "failed"]


@dataclass(frozen=True)
class DimFilter:
    """One condition on a named dimension: ``value OP bound`` (ops from :data:`DIM_OPS`)."""

    name: str
    conds: tuple[tuple[str, int], ...]

    def __str__(self) -> str:
        return " and ".join(f"{self.name}{op}{v}" for op, v in self.conds)


def _int(text: str, spec: str) -> int:
    v = int(text)
    if abs(v) > _INT64:
        raise DimFilterError(f"--dim {spec!r}: {text} is out of range")
    return v


def parse_dim(spec: str) -> DimFilter:
    """Parse ``N>=1024``, ``N=512..2048`` or ``512<=N<4096``; raise :class:`DimFilterError`."""
    if not isinstance(spec, str) or len(spec) > 200:
        raise DimFilterError(f"--dim filter must be a short string; {_SYNTAX}")
    if m := _RANGE_RE.match(spec):
        lo, hi = _int(m.group(2), spec), _int(m.group(3), spec)
        if lo > hi:
            raise DimFilterError(f"--dim {spec!r}: empty range ({lo} > {hi})")
        return DimFilter(m.group(1), ((">=", lo), ("<=", hi)))
    if m := _BOUNDS_RE.match(spec):
        lo_op = ">=" if m.group(2) == "<=" else ">"
        hi_op = m.group(4)
        return DimFilter(m.group(3), ((lo_op, _int(m.group(1), spec)), (hi_op, _int(m.group(5), spec))))
    if m := _CMP_RE.match(spec):
        return DimFilter(m.group(1), ((DIM_OPS[m.group(2)], _int(m.group(3), spec)),))
    raise DimFilterError(f"--dim {spec!r} is not a shape filter; {_SYNTAX}")


def _terms(text: str) -> list[str]:
    if not isinstance(text, str):
        raise UsageError("text search must be a string")
    # Control characters (NUL ends an FTS5 string early) become separators.
    clean = "".join(" " if ord(c) < 32 or c == "\x7f" else c for c in text)
    terms = clean.split()
    if not terms:
        raise UsageError("text search is empty")
    if len(clean) > MAX_TEXT_CHARS or len(terms) > MAX_TERMS:
        raise UsageError(f"text search is limited to {MAX_TEXT_CHARS} characters and {MAX_TERMS} words")
    return terms


def fts_match(text: str) -> str:
    """User text as an FTS5 query: every word a quoted phrase, all of them required."""
    return " ".join('"' + t.replace('"', '""') + '"' for t in _terms(text))


def like_pattern(term: str) -> str:
    """``%term%`` with LIKE's wildcards escaped (use with ``ESCAPE '\\'``)."""
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


@dataclass(frozen=True)
class Query:
    """Filters (all must hold), preferences for the ranking, and the number of rows."""

    task: str | None = None
    tags: tuple[str, ...] = ()
    stage: str | None = None
    code: str | None = None
    outcome: Outcome | None = None
    hardware: str | None = None
    hardware_key: str | None = None  # exactly this device (see extract.hardware_key)
    dims: tuple[DimFilter, ...] = ()
    text: str | None = None
    origin: str | None = None
    limit: int = 20
    recent: bool = False  # newest first, ignoring the ranking
    dim_kinds: tuple[str, ...] | None = None  # shape kinds a dim filter may match (None: all)
    prefer_task: str | None = None
    prefer_tags: tuple[str, ...] = ()
    prefer_hardware_key: str | None = None

    def validate(self) -> Query:
        """Raise :class:`UsageError` for a query that cannot be run as asked."""
        if not isinstance(self.limit, int) or isinstance(self.limit, bool) or \
                not 1 <= self.limit <= MAX_LIMIT:
            raise UsageError(f"limit must be an integer from 1 to {MAX_LIMIT}")
        if len(self.dims) > MAX_DIM_FILTERS:
            raise DimFilterError(f"at most {MAX_DIM_FILTERS} --dim filters")
        if len(self.tags) > 16 or len(self.prefer_tags) > 16:
            raise UsageError("at most 16 tags")
        for name in ("task", "stage", "code", "hardware", "hardware_key", "origin", "prefer_task"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, str) or len(v) > 512):
                raise UsageError(f"{name} must be a string of at most 512 characters")
        if self.outcome not in (None, "passed", "failed"):
            raise UsageError("outcome must be 'passed' or 'failed'")
        if self.text is not None:
            _terms(self.text)
        return self


def _dims_clause(filters: tuple[DimFilter, ...], kinds: tuple[str, ...] | None,
                 params: list[Any]) -> str:
    """All filters hold on one and the same shape of the attempt."""
    inner: list[str] = []
    for i, f in enumerate(filters):
        alias = f"d{i}"
        conds = [f"{alias}.attempt_id = a.id", f"{alias}.name = ?"]
        params.append(f.name)
        if i:
            conds.append(f"{alias}.shape = d0.shape")
        for op, value in f.conds:
            conds.append(f"{alias}.value {DIM_OPS[op]} ?")
            params.append(value)
        if kinds is not None:
            conds.append(f"{alias}.kind IN ({', '.join('?' * len(kinds))})")
            params.extend(kinds)
        inner.append(" AND ".join(conds))
    sql = f"SELECT 1 FROM attempt_dims d0 WHERE {inner[0]}"
    for i, cond in enumerate(inner[1:], start=1):
        sql += f" AND EXISTS (SELECT 1 FROM attempt_dims d{i} WHERE {cond})"
    return f"EXISTS ({sql})"


def _text_clause(text: str, fts: bool, params: list[Any]) -> str:
    if fts:
        params.append(fts_match(text))
        return "f.attempts_fts MATCH ?"
    parts = []
    for term in _terms(text):
        pat = like_pattern(term)
        parts.append("(a.messages LIKE ? ESCAPE '\\' OR a.diagnostics LIKE ? ESCAPE '\\' "
                     "OR a.source LIKE ? ESCAPE '\\')")
        params.extend([pat, pat, pat])
    return " AND ".join(parts)


def build_select(q: Query, fts: bool) -> tuple[str, list[Any]]:
    """SQL and bound parameters selecting ``a.id`` and the rank of matching attempts."""
    q.validate()
    where: list[str] = []
    params: list[Any] = []
    use_fts = fts and q.text is not None
    rank = "bm25(attempts_fts, 5.0, 3.0, 1.0)" if use_fts else "0.0"
    order: list[str] = []
    order_params: list[Any] = []
    if q.prefer_task is not None:
        order.append("(a.task = ?) DESC")
        order_params.append(q.prefer_task)
    if q.prefer_tags:
        order.append(f"(SELECT COUNT(*) FROM attempt_tags pt WHERE pt.attempt_id = a.id AND "
                     f"pt.tag IN ({', '.join('?' * len(q.prefer_tags))})) DESC")
        order_params.extend(q.prefer_tags)
    if q.prefer_hardware_key is not None:
        order.append("(a.hardware_key IS ?) DESC")
        order_params.append(q.prefer_hardware_key)
    for col, value in (("a.task", q.task), ("a.stage", q.stage), ("a.origin", q.origin),
                       ("a.hardware_key", q.hardware_key)):
        if value is not None:
            where.append(f"{col} = ?")
            params.append(value)
    for tag in q.tags:
        where.append("EXISTS (SELECT 1 FROM attempt_tags t WHERE t.attempt_id = a.id AND t.tag = ?)")
        params.append(tag)
    if q.code is not None:
        where.append("EXISTS (SELECT 1 FROM attempt_errors e WHERE e.attempt_id = a.id AND e.code = ?)")
        params.append(q.code)
    if q.outcome is not None:
        where.append("a.ok = ?")
        params.append(1 if q.outcome == "passed" else 0)
    if q.hardware is not None:
        where.append("a.hardware LIKE ? ESCAPE '\\'")
        params.append(like_pattern(q.hardware))
    if q.dims:
        where.append(_dims_clause(q.dims, q.dim_kinds, params))
    if q.text is not None:
        where.append(_text_clause(q.text, fts, params))
    if q.recent:
        order = ["a.created_at DESC", "a.id DESC"]
        order_params = []
    else:
        order += ["rank ASC", "a.ok DESC",
                  "(CASE WHEN a.ok THEN a.median_ms END) IS NULL",
                  "(CASE WHEN a.ok THEN a.median_ms END) ASC", "a.created_at DESC", "a.id DESC"]
    join = " JOIN attempts_fts f ON f.rowid = a.id" if use_fts else ""
    sql = (f"SELECT a.id, {rank} AS rank FROM attempts a{join}"
           + (f" WHERE {' AND '.join(where)}" if where else "")
           + f" ORDER BY {', '.join(order)} LIMIT ?")
    return sql, [*params, *order_params, q.limit]
