"""structlog set-up: one event per line on stderr (stdout is reserved for reports).

The level comes from ``kgrader --log-level`` (else ``$KGRADER_LOG``, else ``warning``), the
format from ``kgrader --log-format`` (else ``$KGRADER_LOG_FORMAT``, else ``json`` when stderr
is not a terminal and ``console`` when it is).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO, cast

import structlog

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMATS = ("json", "console")


class _Stderr:
    """Whatever ``sys.stderr`` is when an event is written, not when logging was set up: a
    caller that swaps it for a while (click's CliRunner, pytest's capture) closes the old
    stream when done, and events written there afterwards raised ValueError."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str | None = None, fmt: str | bool | None = None) -> None:
    """Send events at ``level`` and above to stderr, as ``fmt`` (``json`` or ``console``;
    ``True``/``False`` are accepted for json lines or not)."""
    name = (level or os.environ.get("KGRADER_LOG", "warning")).upper()
    lvl = getattr(logging, name, logging.WARNING)
    if fmt is None:
        fmt = os.environ.get("KGRADER_LOG_FORMAT") or None
    if isinstance(fmt, bool):
        json_lines = fmt
    elif fmt in LOG_FORMATS:
        json_lines = fmt == "json"
    else:  # unset or unknown: machines get JSON lines, terminals the console renderer
        json_lines = not sys.stderr.isatty()
    renderer = structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(cast(TextIO, _Stderr())),
        cache_logger_on_first_use=False,
    )


StepListener = Callable[[str, Mapping[str, Any]], None]
_listeners: dict[int, list[StepListener]] = {}  # per thread: parallel evaluations stay apart


def step(name: str, **fields: Any) -> None:
    """A step of a long operation begins (``scan``, ``sandbox``, ``report``...): an
    ``info`` event, and a call of every listener this thread registered (:func:`on_step`).
    A listener's failure never stops the operation."""
    _tell(threading.get_ident(), name, fields)


def relay() -> StepListener:
    """A :func:`step` for another thread (a reader of the judge's live steps) that reaches
    the listeners of the thread calling ``relay`` now, as they are when it is called."""
    ident = threading.get_ident()
    return lambda name, fields: _tell(ident, name, fields)


def _tell(ident: int, name: str, fields: Mapping[str, Any]) -> None:
    structlog.get_logger("kgrader.progress").info("step", step=name, **fields)
    for listener in list(_listeners.get(ident, ())):
        try:
            listener(name, fields)
        except Exception:  # progress is for people; grading goes on without it
            structlog.get_logger("kgrader.progress").warning("step_listener_failed", step=name)


@contextmanager
def on_step(listener: StepListener) -> Iterator[None]:
    """Call ``listener(name, fields)`` for each :func:`step` of this thread in the block."""
    mine = _listeners.setdefault(threading.get_ident(), [])
    mine.append(listener)
    try:
        yield
    finally:
        mine.remove(listener)
        if not mine:
            _listeners.pop(threading.get_ident(), None)


if not structlog.is_configured():
    configure()
