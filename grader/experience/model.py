"""What one stored evaluation holds, the size caps on it, and the store's errors.

An :class:`Attempt` is the triple (task, code, verdict with diagnostics) in the flat form
the store writes. Everything in it is bounded by the caps below, enforced once in
:func:`Attempt.capped` so that no caller can store an unbounded string: a hostile
candidate's source, error messages that echo its output, or a report's warnings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from grader.errors import UsageError

__all__ = [
    "MAX_DIAGNOSTICS_BYTES",
    "MAX_ERRORS",
    "MAX_MESSAGE_BYTES",
    "MAX_SHAPES",
    "MAX_SOURCE_BYTES",
    "MAX_TAGS",
    "MAX_WARNINGS",
    "Attempt",
    "DimFilterError",
    "ErrorItem",
    "ExperienceError",
    "ExperienceSchemaError",
    "Origin",
    "Shape",
    "cap_text",
]

MAX_SOURCE_BYTES = 256 * 1024
MAX_MESSAGE_BYTES = 4 * 1024
MAX_DIAGNOSTICS_BYTES = 16 * 1024
MAX_ERRORS = 16
MAX_WARNINGS = 16
MAX_TAGS = 16
MAX_TAG_CHARS = 64
MAX_SHAPES = 32
MAX_DIMS_PER_SHAPE = 8
MAX_FIGURES_BYTES = 4 * 1024
MAX_SHORT = 512  # task name, hardware text, origin reference, stage, code
TRUNCATED = " …[truncated]"

Origin = Literal["run", "tool", "leaderboard"]
ShapeKind = Literal["tune", "hidden", "failed", "timed"]


class ExperienceError(UsageError):
    """The experience store cannot be opened, read or written (bad path, not a store)."""

    code = "experience_store"


class ExperienceSchemaError(ExperienceError):
    """The store was written by a schema version this kgrader does not know."""

    code = "experience_schema"


class DimFilterError(UsageError):
    """A ``--dim`` filter is not ``NAME OP INT`` or ``NAME=LO..HI``."""

    code = "bad_dim_filter"


def cap_text(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes (on a character boundary).

    Returns the text and whether it was cut; a cut text ends in a visible marker, and the
    marker is counted inside the cap.
    """
    # NUL bytes are shown, not stored: some SQLite tools stop reading a text at one. Lone
    # surrogates (from a file decoded with surrogateescape) cannot be stored as UTF-8.
    data = text.replace("\x00", "\\0").encode("utf-8", errors="replace")
    if len(data) <= max_bytes:
        return data.decode("utf-8"), False
    keep = max(0, max_bytes - len(TRUNCATED.encode("utf-8")))
    return data[:keep].decode("utf-8", errors="ignore") + TRUNCATED, True


def _short(text: str | None) -> str | None:
    return None if text is None else cap_text(text, MAX_SHORT)[0]


@dataclass(frozen=True)
class ErrorItem:
    """One error of the report: stage, stable code, message (capped), source line."""

    stage: str
    code: str
    message: str
    line: int | None = None


@dataclass(frozen=True)
class Shape:
    """One dimension binding the attempt met: a task shape, the failing one or the timed one."""

    kind: ShapeKind
    dims: dict[str, int]


@dataclass(frozen=True)
class Attempt:
    """One finished evaluation, flattened for the store (see :mod:`grader.experience.schema`)."""

    key: str  # identity: sha256 of the canonical report (or of the leaderboard row key)
    task: str
    tags: tuple[str, ...]
    origin: Origin
    ok: bool
    stage: str | None
    created_at: str
    origin_ref: str | None = None
    accepted: bool | None = None
    dtypes: tuple[str, ...] = ()
    shapes: tuple[Shape, ...] = ()
    device: str | None = None
    hardware: str | None = None
    hardware_key: str | None = None
    candidate_sha256: str | None = None
    source: str | None = None
    source_truncated: bool = False
    errors: tuple[ErrorItem, ...] = ()
    warnings: tuple[str, ...] = ()
    median_ms: float | None = None
    mean_ms: float | None = None
    min_ms: float | None = None
    bandwidth_gbps: float | None = None
    tflops: float | None = None
    speedup: float | None = None
    improvement_fraction: float | None = None
    min_improvement_fraction: float | None = None
    roofline_fraction: float | None = None
    bottleneck: str | None = None
    diagnostics: str = ""
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def first_error(self) -> ErrorItem | None:
        return self.errors[0] if self.errors else None

    def capped(self) -> Attempt:
        """This attempt with every cap applied (idempotent; the store calls it on write)."""
        src, src_cut = (None, False) if self.source is None else cap_text(self.source, MAX_SOURCE_BYTES)
        errors = tuple(
            ErrorItem(stage=cap_text(e.stage, 32)[0], code=cap_text(e.code, 64)[0],
                      message=cap_text(e.message, MAX_MESSAGE_BYTES)[0], line=e.line)
            for e in self.errors[:MAX_ERRORS])
        warnings = tuple(cap_text(w, MAX_MESSAGE_BYTES)[0] for w in self.warnings[:MAX_WARNINGS])
        tags = tuple(dict.fromkeys(cap_text(t, MAX_TAG_CHARS)[0] for t in self.tags))[:MAX_TAGS]
        shapes = tuple(Shape(s.kind, dict(list(s.dims.items())[:MAX_DIMS_PER_SHAPE]))
                       for s in self.shapes[:MAX_SHAPES])
        return replace(
            self, task=cap_text(self.task, 128)[0], tags=tags, origin_ref=_short(self.origin_ref),
            stage=_short(self.stage), dtypes=tuple(d[:16] for d in self.dtypes[:MAX_TAGS]),
            shapes=shapes, device=_short(self.device), hardware=_short(self.hardware),
            source=src, source_truncated=self.source_truncated or src_cut, errors=errors,
            warnings=warnings, bottleneck=_short(self.bottleneck),
            diagnostics=cap_text(self.diagnostics, MAX_DIAGNOSTICS_BYTES)[0],
            figures=_cap_figures(self.figures))


def _cap_figures(figures: dict[str, Any]) -> dict[str, Any]:
    """Figures are small by construction; a set that is not gets dropped, never cut mid-value."""
    try:
        size = len(json.dumps(figures, default=str))
    except (TypeError, ValueError):
        return {"dropped": "figures were not JSON"}
    return figures if size <= MAX_FIGURES_BYTES else {"dropped": f"figures of {size} bytes"}
