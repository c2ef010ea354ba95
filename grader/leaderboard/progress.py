"""Progress for people: a rich progress bar on stderr when it is a terminal.

Machines get structlog events instead (``evaluation_committed`` etc., emitted by the
runner whatever this display does). Submission names are untrusted: rich markup in them
is escaped before display.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress


class Progress:
    """A thin wrapper: ``start(what, total)``, ``advance(...)``, ``stop()``; no-op when disabled."""

    def __init__(self, enabled: bool, console: Console | None = None):
        self.enabled = enabled
        self.console = console or Console(stderr=True)
        self._bar: RichProgress | None = None
        self._task: TaskID | None = None

    def start(self, what: str, total: int) -> None:
        if not self.enabled:
            return
        self.stop()
        self._bar = RichProgress(TextColumn("[bold]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                                 TextColumn("{task.fields[last]}"), console=self.console)
        self._bar.start()
        self._task = self._bar.add_task(escape(what), total=total, last="")

    def advance(self, submission: str, task: str, verdict: str) -> None:
        if self._bar is None or self._task is None:
            return
        colour = {"ok": "green", "failed": "red", "anomaly": "magenta"}.get(verdict, "yellow")
        last = f"{escape(submission)}/{escape(task)}: [{colour}]{escape(verdict)}[/]"
        self._bar.update(self._task, advance=1, last=last)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
        self._bar = self._task = None
