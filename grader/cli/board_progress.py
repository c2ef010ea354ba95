"""The leaderboard's progress for ``kgrader leaderboard run|demo``: its rich bar on a
terminal (:mod:`grader.leaderboard.progress`), else one plain line per batch and per
finished evaluation on stderr (docs/cli.md)."""

from __future__ import annotations

import sys
import time

import click

from grader.leaderboard.progress import Progress as BoardProgress
from grader.report.text import plain


class BoardLines(BoardProgress):
    """The leaderboard's progress: its rich bar on a terminal, else one line per batch and
    per finished evaluation."""

    def __init__(self, enabled: bool = True) -> None:
        self.tty = sys.stderr.isatty()
        super().__init__(enabled=enabled and self.tty)
        self.lines = enabled and not self.tty
        self.t0 = time.monotonic()
        self.done = self.total = 0

    def _say(self, text: str) -> None:
        click.echo(plain(f"kgrader leaderboard: +{time.monotonic() - self.t0:.1f}s {text}"),
                   err=True)

    def start(self, what: str, total: int) -> None:
        super().start(what, total)
        if self.lines:
            self.done, self.total = 0, total
            self._say(f"{what}: {total} evaluation(s)")

    def advance(self, submission: str, task: str, verdict: str) -> None:
        super().advance(submission, task, verdict)
        if self.lines:
            self.done += 1
            self._say(f"[{self.done}/{self.total}] {submission}/{task}: {verdict}")
