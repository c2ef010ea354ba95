"""structlog set-up: one event per line on stderr (stdout is reserved for reports).

The level comes from ``kgrader --log-level`` (else ``$KGRADER_LOG``, else ``warning``), the
format from ``kgrader --log-format`` (else ``$KGRADER_LOG_FORMAT``, else ``json`` when stderr
is not a terminal and ``console`` when it is).

structlog is imported when the first event at or above the level is written, never
before: its import (with the rich, pygments, attrs and asyncio it brings) was 0.1-0.16 s of
every ``kgrader`` command's start on a 2-core host, and at the default level most commands
write no event at all. The host's modules take their loggers from :func:`get_logger`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import ModuleType
from typing import Any, TextIO, cast

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


_LOCK = threading.Lock()
# What configure() was last asked for (level name, format); None: the defaults, from the
# environment when structlog is first needed.
_asked: tuple[str | None, str | bool | None] | None = None
_applied = False  # structlog configured by this module
_level: int | None = None  # the threshold events are filtered by before structlog is imported


def _threshold(level: str | None) -> int:
    name = (level or os.environ.get("KGRADER_LOG", "warning")).upper()
    return cast(int, getattr(logging, name, logging.WARNING))


def configure(level: str | None = None, fmt: str | bool | None = None) -> None:
    """Send events at ``level`` and above to stderr, as ``fmt`` (``json`` or ``console``;
    ``True``/``False`` are accepted for json lines or not). Applied to structlog at once when
    it is imported already, else when the first event needs it."""
    global _asked, _applied, _level
    with _LOCK:
        _asked, _level = (level, fmt), _threshold(level)
        if "structlog" in sys.modules:
            _apply(sys.modules["structlog"], level, fmt)
            _applied = True
        else:
            _applied = False


def _apply(structlog: Any, level: str | None, fmt: str | bool | None) -> None:
    lvl = _threshold(level)
    if fmt is None:
        fmt = os.environ.get("KGRADER_LOG_FORMAT") or None
    if isinstance(fmt, bool):
        json_lines = fmt
    elif fmt in LOG_FORMATS:
        json_lines = fmt == "json"
    else:  # unset or unknown: machines get JSON lines, terminals the console renderer
        json_lines = not sys.stderr.isatty()
    # JSON lines carry an exception's traceback as text (``exception``); the console
    # renderer formats it itself.
    renderer = ([structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
                if json_lines else [structlog.dev.ConsoleRenderer()])
    structlog.configure(
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True), *renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(cast(TextIO, _Stderr())),
        cache_logger_on_first_use=False,
    )


def _structlog() -> ModuleType:
    """structlog, configured: as configure() last asked, or (nothing asked, and nobody
    configured it) with the defaults."""
    global _applied
    import structlog

    if not _applied:
        with _LOCK:
            if not _applied:
                if _asked is not None:
                    _apply(structlog, *_asked)
                elif not structlog.is_configured():
                    _apply(structlog, None, None)
                _applied = True
    return structlog


class Logger:
    """A structlog logger taken when its first event passes the level (:func:`get_logger`)."""

    __slots__ = ("_name",)

    def __init__(self, name: str | None) -> None:
        self._name = name

    def _emit(self, method: str, level: int, event: str, fields: dict[str, Any]) -> None:
        threshold = _level if _level is not None else _threshold(None)
        if level < threshold and "structlog" not in sys.modules:
            return  # below the level, and nothing imported for it
        logger = _structlog().get_logger(*(() if self._name is None else (self._name,)))
        getattr(logger, method)(event, **fields)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit("debug", logging.DEBUG, event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit("info", logging.INFO, event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit("warning", logging.WARNING, event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit("error", logging.ERROR, event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """An error event with the exception being handled (call it in an ``except``)."""
        self._emit("exception", logging.ERROR, event, fields)


def get_logger(name: str | None = None) -> Logger:
    """The host's logger ``name``: structlog's, imported only for an event that is written."""
    return Logger(name)


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
    _PROGRESS.info("step", step=name, **fields)
    for listener in list(_listeners.get(ident, ())):
        try:
            listener(name, fields)
        except Exception:  # progress is for people; grading goes on without it
            _PROGRESS.warning("step_listener_failed", step=name)


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


_PROGRESS = get_logger("kgrader.progress")
