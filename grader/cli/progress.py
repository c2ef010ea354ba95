"""Progress of long commands on stderr: a live line (rich) on a terminal, one plain line
per step otherwise (a log file or CI shows where a 20 s run is, not minutes of silence).

Steps come from :func:`grader.logs.step` (the host's own: scan, sandbox start, report);
the judge's steps (sandbox started, judge ready, compile, correctness, timing, acceptance)
arrive live as the judge tells them (:mod:`grader.backends.progress`: each stage when it
begins, ``running``, and when it ends, with its seconds), from the reader's thread; those
its record carries but nobody saw live (teardown, a step whose line was dropped) are told
when the sandbox is gone (:func:`tell_judge_steps`). stdout is never touched: ``--json``
output stays one document.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from grader.logs import on_step
from grader.report.text import plain

if TYPE_CHECKING:  # rich is imported where a terminal or a rendered report needs it
    from rich.console import Console

# The judge's phases worth a line, in the order they run (grader.report.model.SandboxInfo).
JUDGE_STEPS = (("sandbox_setup", "sandbox started"), ("judge_ready", "judge ready"),
               ("compile", "compile"), ("correctness", "correctness"),
               ("benchmark", "timing"), ("accept", "acceptance"), ("teardown", "teardown"))


def _fields(fields: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={plain(v)}" for k, v in fields.items() if v is not None)


class StepLines:
    """Where steps go: a live spinner line on a terminal, else ``kgrader CMD: +T s STEP``
    lines. ``enabled=False`` says nothing."""

    def __init__(self, command: str, *, enabled: bool = True, tty: bool | None = None) -> None:
        self.command = command
        self.enabled = enabled
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.t0 = time.monotonic()
        self._live: Any = None  # rich.progress.Progress, imported when a terminal needs it
        self._task: Any = None
        self.told: set[str] = set()  # the steps said so far, by name
        self._lock = threading.Lock()  # the judge's live steps come from a reader thread

    def start(self) -> None:
        if self.enabled and self.tty:
            from rich.console import Console
            from rich.progress import Progress as RichProgress
            from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

            self._live = RichProgress(SpinnerColumn(), TextColumn("{task.description}"),
                                      TimeElapsedColumn(), console=Console(stderr=True),
                                      transient=True)
            self._live.start()
            self._task = self._live.add_task(_escape(f"{self.command}: starting"), total=None)

    def step(self, name: str, fields: Mapping[str, Any] | None = None) -> None:
        if not self.enabled:
            return
        extra = _fields(fields or {})
        text = f"{name}{' ' + extra if extra else ''}"
        with self._lock:
            self.told.add(name)
            if self._live is not None:
                self._live.update(self._task, description=_escape(plain(f"{self.command}: {text}")))
            else:
                click.echo(plain(f"kgrader {self.command}: +{time.monotonic() - self.t0:.1f}s "
                                 f"{text}"), err=True)

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def judge_steps(phases: Mapping[str, float]) -> list[tuple[str, float]]:
    """The judge's steps a record reports, with their seconds (compile: the whole stage,
    else the sum of its parts)."""
    out: list[tuple[str, float]] = []
    for key, label in JUDGE_STEPS:
        value = phases.get(key)
        if value is None and key == "compile":
            parts = [v for k, v in phases.items() if k.startswith("compile_")]
            value = sum(parts) if parts else None
        if value is not None:
            out.append((label, float(value)))
    return out


@contextmanager
def steps(command: str, *, enabled: bool = True) -> Iterator[StepLines]:
    """Show the steps :func:`grader.logs.step` announces while the block runs."""
    lines = StepLines(command, enabled=enabled)
    lines.start()
    try:
        with on_step(lines.step):
            yield lines
    finally:
        lines.stop()


def tell_judge_steps(lines: StepLines, phases: Mapping[str, float]) -> None:
    """After the sandbox is gone: one line per judge step its record carries that was not
    told live, with its time (plain mode only: on a terminal the report that follows shows
    them)."""
    if lines.tty:
        return
    for label, seconds in judge_steps(phases):
        if f"judge: {label}" not in lines.told:
            lines.step(f"judge: {label}", {"s": round(seconds, 3)})


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def wide_console() -> Console:
    """stdout for people: the terminal's width, else (piped, captured) 240 columns, not
    rich's 80 that folds every table."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=240)
