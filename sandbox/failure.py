"""A stage's failure inside the judge, carrying whose fault it is.

isolate keeps the keeper's own faults (``XX``) apart from the program's (``RE``, ``TO``);
here every failure is created with its ``origin`` fixed at the place that knows it:
anything a runner did or failed to do is the candidate's, a harness or reference fault is
the infrastructure's.
"""

from __future__ import annotations

from typing import Any

from sandbox.wire import ErrorStage, ErrorWire, Origin


class StageFailure(Exception):
    """Ends the evaluation at ``stage``; the judge records :attr:`error`."""

    def __init__(self, stage: ErrorStage, code: str, message: str, *, origin: Origin = "candidate",
                 line: int | None = None, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.error = ErrorWire(stage=stage, code=code[:64], message=message[:4000], origin=origin,
                               line=line, detail=dict(detail or {}))

    def renamed(self, prefix: str, message_prefix: str = "") -> StageFailure:
        """The same failure, blamed on another side (``current_``) with more words."""
        e = self.error
        return StageFailure(e.stage, prefix + e.code, message_prefix + e.message, origin=e.origin,
                            line=e.line, detail=e.detail)


def infrastructure(code: str, message: str, detail: dict[str, Any] | None = None) -> StageFailure:
    """A fault of the harness, the task's reference or the machine: never the candidate's."""
    return StageFailure("sandbox", code, message, origin="infrastructure", detail=detail)
