"""What every command shares: exit codes, stop signals, and the one way a kgrader error
reaches the user.

Exit codes: 0 passed (and accepted), 1 the candidate failed or was rejected, 2 a usage or
infrastructure error: one ``error:`` (or ``infrastructure error:``) line on stderr, never a
traceback; 130 interrupted by SIGINT, 143 by SIGTERM (128 + the signal, the shell's
convention), after every sandbox, container and worker the command started was stopped
and its folders removed, with one ``interrupted:`` line on stderr.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from functools import wraps
from types import FrameType
from typing import Any, NoReturn, TypeVar

import click

from grader.errors import InfrastructureError, KgraderError

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2
EXIT_SIGINT, EXIT_SIGTERM = 128 + signal.SIGINT, 128 + signal.SIGTERM
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
F = TypeVar("F", bound=Callable[..., Any])
_received: list[int] = []


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


class Interrupted(BaseException):
    """A stop signal arrived. Not an ``Exception``: it unwinds like ``KeyboardInterrupt``
    through every ``except Exception``, and every ``finally`` on the way runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def stop_on_signals() -> None:
    """Make SIGINT and SIGTERM stop the command cleanly (call once, in the main thread).

    The first signal asks every sandbox of this process to stop
    (:func:`grader.backends.stop.request_stop`: no new one starts, the running ones are
    killed, including those of worker threads) and raises :class:`Interrupted` in the main
    thread; a second one while the first unwinds changes nothing.
    """
    from grader.backends.stop import request_stop, stop_requested

    def handler(signum: int, frame: FrameType | None) -> None:
        first = not stop_requested()
        request_stop()
        if first:
            _received.append(signum)
            raise Interrupted(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)


def received_stop() -> Interrupted | None:
    """The stop signal this process received, if any (for an exit that did not unwind
    through :class:`Interrupted`: it still exits 130/143)."""
    return Interrupted(_received[0]) if _received else None


def exit_interrupted(e: Interrupted) -> NoReturn:
    """After :class:`Interrupted` unwound: remove what is still this process's, say so in
    one line, exit 128 + the signal."""
    from grader.backends.stop import kill_own, reclaim_own

    for sig in STOP_SIGNALS:  # the last clean-up is not itself interrupted
        signal.signal(sig, signal.SIG_IGN)
    kill_own()
    left = reclaim_own()
    note = f"; removed {left} item(s) the stop cut short" if left else ""
    click.echo(f"interrupted: {e.name}; stopped every sandbox this command started and "
               f"removed its folders{note}", err=True)
    sys.exit(e.exit_code)


def sweep_orphans() -> None:
    """What killed kgrader processes of this host left: reclaimed when a grading command
    starts (cheap, and only what provably has no live owner: see
    :func:`grader.backends.cleanup.sweep_orphans`)."""
    from grader.backends.cleanup import sweep_orphans as sweep

    sweep()


def check_outputs(dirs: dict[str, Any] | None = None, files: dict[str, Any] | None = None) -> None:
    """Refuse, before any grading, output paths that cannot be written (exit 2): ``dirs``
    and ``files`` map an option's name to its path (``None``: not given)."""
    from grader.outpaths import check_output_dir, check_output_file

    for what, path in (dirs or {}).items():
        if path is not None:
            check_output_dir(path, what)
    for what, path in (files or {}).items():
        if path is not None:
            check_output_file(path, what)
