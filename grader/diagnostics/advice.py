"""Turning a kernel's counters into at most a few sentences a model can act on.

The rules are data (``diagnostics/advice.toml`` at the repository root, beside
``policies/``): each has conditions on metrics with thresholds, a sentence that quotes the
number that triggered it, and a concrete next step. A metric that was not measured makes
its condition false, so no sentence ever rests on a guess. Where the roofline says the
launch is already near its bound, the generic tuning rules give way to one sentence that
says so.
"""

from __future__ import annotations

import math
import operator
import re
import string
import tomllib
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

import grader
from grader.errors import UsageError
from grader.report.diagnostics_model import KernelCounters

Severity = Literal["critical", "high", "medium", "low"]
_RANK: dict[str, int] = {"critical": 0, "high": 1, "medium": 2, "low": 3}
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": operator.eq, "!=": operator.ne,
}
_CONDITION = re.compile(r'^\s*([a-z_][a-z0-9_]*)\s*(<=|>=|==|!=|<|>)\s*(-?[0-9][0-9_.eE+-]*|"[a-z_]+")\s*$')
STRING_METRICS = frozenset({"occupancy_limiter", "top_stall", "bound"})
NUMBER_METRICS = frozenset(
    {name for name, f in KernelCounters.model_fields.items()
     if f.annotation in (float | None, int | None)}
    | {"top_stall_share_pct", "roofline_fraction", "roofline_pct"})
METRICS = STRING_METRICS | NUMBER_METRICS


class AdviceTableError(UsageError):
    """The advice table is not valid TOML or names an unknown metric."""

    code = "bad_advice_table"


def default_table_path() -> Path:
    """``diagnostics/advice.toml`` at the repository root, beside ``policies/``."""
    return Path(grader.__file__).resolve().parent.parent / "diagnostics" / "advice.toml"


class Condition(BaseModel):
    model_config = ConfigDict(frozen=True)

    metric: str
    op: str
    value: float | str

    @classmethod
    def parse(cls, text: str) -> Condition:
        m = _CONDITION.match(text)
        if m is None:
            raise ValueError(f"condition {text!r} is not '<metric> <op> <number or \"word\">'")
        metric, op, raw = m.groups()
        if metric not in METRICS:
            raise ValueError(f"condition {text!r}: unknown metric {metric!r}")
        if raw.startswith('"'):
            if metric not in STRING_METRICS or op not in ("==", "!="):
                raise ValueError(f"condition {text!r}: a word compares only with == or != "
                                 f"on {sorted(STRING_METRICS)}")
            return cls(metric=metric, op=op, value=raw.strip('"'))
        if metric in STRING_METRICS:
            raise ValueError(f"condition {text!r}: {metric} is a word, not a number")
        return cls(metric=metric, op=op, value=float(raw))

    def holds(self, values: Mapping[str, Any]) -> bool:
        v = values.get(self.metric)
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            return False  # not measured: never advise on a guess
        if isinstance(self.value, str) != isinstance(v, str):
            return False
        return bool(_OPS[self.op](v, self.value))


def _fields(text: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(text) if f]


def _check_template(text: str) -> str:
    for _, field, spec, conv in string.Formatter().parse(text):
        if field is None:
            continue
        if field not in METRICS or conv:
            raise ValueError(f"template {text!r}: {{{field}}} is not a metric name")
        if spec and not re.fullmatch(r"[,.0-9a-z%]*", spec):
            raise ValueError(f"template {text!r}: format {spec!r} is not a plain number format")
    return text


class Rule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    severity: Severity
    when: list[str] = Field(min_length=1)
    sentence: str = Field(min_length=1, max_length=300)
    next_step: str = Field(min_length=1, max_length=300)
    generic: bool = True
    rationale: str = ""

    @field_validator("sentence", "next_step")
    @classmethod
    def _template(cls, v: str) -> str:
        return _check_template(v)

    @field_validator("when")
    @classmethod
    def _conditions(cls, v: list[str]) -> list[str]:
        for text in v:
            Condition.parse(text)
        return v

    def conditions(self) -> list[Condition]:
        return [Condition.parse(t) for t in self.when]

    def fires(self, values: Mapping[str, Any]) -> bool:
        """All conditions hold and every number the sentence quotes was measured."""
        quoted = _fields(self.sentence) + _fields(self.next_step)
        return all(c.holds(values) for c in self.conditions()) and \
            all(values.get(f) is not None for f in quoted)


class NearBound(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    fraction: float = Field(0.8, gt=0, le=1.5)
    sentence: str
    next_step: str

    @field_validator("sentence", "next_step")
    @classmethod
    def _template(cls, v: str) -> str:
        return _check_template(v)


class AdviceTable(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_sentences: int = Field(5, ge=1, le=10)
    near_bound: NearBound
    rules: list[Rule] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> AdviceTable:
        ids = [r.id for r in self.rules]
        if len(set(ids)) != len(ids):
            raise ValueError("rule ids must be unique")
        return self


@lru_cache(maxsize=8)
def load_table(path: Path | None = None) -> AdviceTable:
    """Parse and validate an advice table (default: :func:`default_table_path`)."""
    p = path or default_table_path()
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise AdviceTableError(f"cannot read the advice table {p}: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise AdviceTableError(f"{p}: not valid TOML: {e}") from None
    try:
        return AdviceTable.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise AdviceTableError(f"{p}: {loc}: {first['msg']}") from None


def metric_values(c: KernelCounters, roofline_fraction: float | None,
                  bound: str | None) -> dict[str, Any]:
    """The names conditions and templates may use, for one kernel."""
    values: dict[str, Any] = {k: v for k, v in c.model_dump().items() if k in METRICS}
    top = c.top_stalls[0] if c.top_stalls else None
    values.update(top_stall=top.reason if top else None,
                  top_stall_share_pct=top.share_pct if top else None, bound=bound,
                  roofline_fraction=roofline_fraction,
                  roofline_pct=None if roofline_fraction is None else 100.0 * roofline_fraction)
    return values


def _render(template: str, values: Mapping[str, Any]) -> str:
    return template.format_map(dict(values))


def advise(c: KernelCounters, table: AdviceTable | None = None, *,
           roofline_fraction: float | None = None, bound: str | None = None) -> list[str]:
    """At most ``table.max_sentences`` sentences for one kernel, most severe first."""
    t = table or load_table()
    values = metric_values(c, roofline_fraction, bound)
    near = (roofline_fraction is not None and bound is not None
            and t.near_bound.fraction <= roofline_fraction)
    near = near and all(values.get(f) is not None
                        for f in _fields(t.near_bound.sentence) + _fields(t.near_bound.next_step))
    out: list[str] = []
    if near:
        out.append(f"{_render(t.near_bound.sentence, values)}; {_render(t.near_bound.next_step, values)}")
    fired = [r for r in t.rules if not (near and r.generic) and r.fires(values)]
    fired.sort(key=lambda r: _RANK[r.severity])  # stable: file order within a severity
    for r in fired:
        out.append(f"{_render(r.sentence, values)}; {_render(r.next_step, values)}")
    return out[: t.max_sentences]


def fired_rules(c: KernelCounters, table: AdviceTable | None = None, *,
                roofline_fraction: float | None = None, bound: str | None = None) -> list[str]:
    """Ids of the rules whose conditions hold (for tests and logs), in table order."""
    t = table or load_table()
    values = metric_values(c, roofline_fraction, bound)
    return [r.id for r in t.rules if r.fires(values)]
