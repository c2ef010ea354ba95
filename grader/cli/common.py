"""What every command shares: exit codes and the one way a kgrader error reaches the user.

Exit codes: 0 passed (and accepted), 1 the candidate failed or was rejected, 2 a usage or
infrastructure error: one ``error:`` (or ``infrastructure error:``) line on stderr, never a
traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, NoReturn, TypeVar

import click

from grader.errors import InfrastructureError, KgraderError

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2
F = TypeVar("F", bound=Callable[..., Any])


def fail(err: KgraderError | str) -> NoReturn:
    """Print one line (plus a hint, if the error has one) and exit 2."""
    kind = "infrastructure error" if isinstance(err, InfrastructureError) else "error"
    click.echo(f"{kind}: {err}", err=True)
    sys.exit(EXIT_ERROR)


def kgrader_errors(func: F) -> F:
    """Turn kgrader's own errors raised by a command into :func:`fail`."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except KgraderError as e:
            fail(e)

    return wrapper  # type: ignore[return-value]
