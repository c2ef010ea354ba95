"""structlog set-up: one event per line on stderr (stdout is reserved for reports)."""

from __future__ import annotations

import logging
import os
import sys

import structlog


def configure(level: str | None = None, json_lines: bool | None = None) -> None:
    """Send events to stderr; JSON lines when stderr is not a terminal (for machines)."""
    name = (level or os.environ.get("KGRADER_LOG", "warning")).upper()
    lvl = getattr(logging, name, logging.WARNING)
    if json_lines is None:
        json_lines = not sys.stderr.isatty()
    renderer = structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


if not structlog.is_configured():
    configure()
