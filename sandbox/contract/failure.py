"""A stage's failure inside the judge, carrying whose fault it is.

isolate keeps the keeper's own faults (``XX``) apart from the program's (``RE``, ``TO``);
here every failure is created with its ``origin`` fixed at the place that knows it:
anything a runner did or failed to do is the candidate's, a harness or reference fault is
the infrastructure's. The code must be one the catalogue defines
(:mod:`sandbox.contract.codes`), which also supplies the origin when the code can have
only one; a code that can be either is refused without it. Its text is data
(``sandbox.contract.text``): cleaned and capped on the way in.
"""

from __future__ import annotations

from typing import Any

from sandbox.contract import codes, text
from sandbox.contract.wire import ErrorStage, ErrorWire, Origin


class StageFailure(Exception):
    """Ends the evaluation at ``stage``; the judge records :attr:`error`.

    Raises :class:`sandbox.contract.codes.UnknownCode` for a code the catalogue does not
    define, for an origin it does not allow for the code, and for a missing origin where
    the code can have two (``tests/unit/test_error_catalogue.py`` finds these statically)."""

    def __init__(self, stage: ErrorStage, code: str, message: str, *, origin: Origin | None = None,
                 line: int | None = None, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        blame = codes.origin_of(code, origin)
        if blame == "usage":  # a host-only code: never the judge's
            raise codes.UnknownCode(f"{code} is a host code, not a stage's failure")
        # Every message and detail may hold the candidate's text (a runner's exception, an
        # attribute or file name it chose, a tool's echo of its kernel names): cleaned here,
        # where each failure enters the record, so nothing in it can break the host.
        self.error = ErrorWire(stage=stage, code=code,
                               message=text.clean(message, text.MESSAGE_CAP), origin=blame,
                               line=line, detail=text.clean_tree(dict(detail or {})))

    def renamed(self, prefix: str, message_prefix: str = "") -> StageFailure:
        """The same failure, blamed on another side (``current_``) with more words."""
        if prefix not in ("", codes.CURRENT):
            raise codes.UnknownCode(f"no side is called {prefix!r}")
        e = self.error
        return StageFailure(e.stage, prefix + e.code, message_prefix + e.message, origin=e.origin,
                            line=e.line, detail=e.detail)


def infrastructure(code: str, message: str, detail: dict[str, Any] | None = None) -> StageFailure:
    """A fault of the harness, the task's reference or the machine: never the candidate's.
    The one helper for it (the judge's error records use its :attr:`StageFailure.error`)."""
    return StageFailure("sandbox", code, message, origin="infrastructure", detail=detail)
