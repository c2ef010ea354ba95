"""Taint by time (judge side): what of the record a runner could have chosen after it saw
a hidden shape.

A hidden shape is a secret the candidate must not publish. Once a runner of untrusted code
has been called on one, everything its outputs and its times determine is a channel it
can write the shape into: the first bad element's index and values, the error maxima, the
mismatch fraction, the figures in a failure's detail, per-call times, the pairs of the
accept stage, the phases' durations. Which shape a later failure *names* says nothing
about this: a wrong value written in the benchmark stage, on the public timed shape, can
encode every hidden dimension. So the judge, which alone knows the order of its calls,
marks by time; the host withholds what is marked (``grader.grading.redact``) and never
works it out itself.

The mark starts at the beginning of the first call whose dims are not known to be public
(a tune shape or the timed shape, not named hidden), before its inputs are written: a
runner could read the buffer's size from its inputs as soon as they are there.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sandbox.contract.wire import ErrorStage, ErrorWire, TaintRecord, TaintSection

# The timing section a stage's calls produce (besides the correctness figures every
# checked call adds to).
STAGE_SECTION: dict[str, TaintSection] = {"benchmark": "timing", "accept": "acceptance"}


class Taint:
    """One evaluation's mark: :meth:`call` before every call, :meth:`touch` before every
    empty timed call, :meth:`stamp` on every error recorded, :meth:`record` at the end."""

    def __init__(self, public: list[dict[str, int]], phases: dict[str, float]):
        self.public = [dict(d) for d in public]
        self.phases = phases  # the evaluation's own dict, read at the start and at the end
        self.hidden_phase: str | None = None
        self.sections: set[TaintSection] = set()
        self.before: dict[str, float] = {}

    @property
    def started(self) -> bool:
        return self.hidden_phase is not None

    def call(self, stage: ErrorStage, where: dict[str, Any]) -> None:
        """A runner is about to be called with ``where`` (the judge's own dims and kind)."""
        dims = where.get("dims")
        public = where.get("shape_kind") != "hidden" and isinstance(dims, dict) \
            and dict(dims) in self.public
        if not self.started and not public:
            self.hidden_phase = str(where.get("phase") or stage)
            self.before = dict(self.phases)
        self.touch(stage)
        if self.started:
            self.sections.add("correctness")  # every checked call adds to its figures

    def touch(self, stage: ErrorStage) -> None:
        """A runner is about to run on the clock of ``stage`` (a call, an empty call)."""
        if self.started and stage in STAGE_SECTION:
            self.sections.add(STAGE_SECTION[stage])

    def stamp(self, error: ErrorWire) -> ErrorWire:
        """``error`` as recorded now: after the mark started, or before it."""
        return dataclasses.replace(error, after_hidden=self.started)

    def record(self, diagnostics: bool) -> TaintRecord:
        """The mark for the record; ``diagnostics``: the record holds a diagnostics section
        (the memory checker's findings come from the correctness calls)."""
        if not self.started:
            return TaintRecord()
        sections = set(self.sections)
        if diagnostics:
            sections.add("diagnostics")
        late = [k for k, v in self.phases.items() if self.before.get(k) != v]
        order: tuple[TaintSection, ...] = ("correctness", "timing", "acceptance", "diagnostics")
        return TaintRecord(hidden_phase=self.hidden_phase,
                           sections=tuple(s for s in order if s in sections),
                           phases=tuple(sorted(late)))
