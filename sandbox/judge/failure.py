"""A stage's failure inside the judge, carrying whose fault it is.

isolate keeps the keeper's own faults (``XX``) apart from the program's (``RE``, ``TO``);
here every failure is created with its ``origin`` fixed at the place that knows it:
anything a runner did or failed to do is the candidate's, a harness or reference fault is
the infrastructure's. Its text is data (``sandbox.contract.text``): cleaned and capped on the way in.
"""

from __future__ import annotations

from typing import Any

from sandbox.contract import text
from sandbox.contract.wire import ErrorStage, ErrorWire, Origin


class StageFailure(Exception):
    """Ends the evaluation at ``stage``; the judge records :attr:`error`."""

    def __init__(self, stage: ErrorStage, code: str, message: str, *, origin: Origin = "candidate",
                 line: int | None = None, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        # Every message and detail may hold the candidate's text (a runner's exception, an
        # attribute or file name it chose, a tool's echo of its kernel names): cleaned here,
        # where each failure enters the record, so nothing in it can break the host.
        self.error = ErrorWire(stage=stage, code=text.clean_code(code[:64], "invalid_code"),
                               message=text.clean(message, text.MESSAGE_CAP), origin=origin,
                               line=line, detail=text.clean_tree(dict(detail or {})))

    def renamed(self, prefix: str, message_prefix: str = "") -> StageFailure:
        """The same failure, blamed on another side (``current_``) with more words."""
        e = self.error
        return StageFailure(e.stage, prefix + e.code, message_prefix + e.message, origin=e.origin,
                            line=e.line, detail=e.detail)


def infrastructure(code: str, message: str, detail: dict[str, Any] | None = None) -> StageFailure:
    """A fault of the harness, the task's reference or the machine: never the candidate's."""
    return StageFailure("sandbox", code, message, origin="infrastructure", detail=detail)
