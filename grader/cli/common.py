"""What every command shares: exit codes, stop signals, and the one way a kgrader error
reaches the user (docs/cli.md is the table).

Exit codes: 0 passed (and accepted), 1 the candidate failed or was rejected, 2 nothing was
graded: a usage or infrastructure error, or a candidate file that cannot be read (missing,
empty, binary, not UTF-8, too large: the same under ``run``, ``scan`` and ``tool``): one
``error:`` (or ``infrastructure error:``) line on stderr, never a traceback; 130
interrupted by SIGINT, 143 by SIGTERM (128 + the signal, the shell's convention), after
every sandbox, container and worker the command started was stopped and its folders
removed, with one ``interrupted:`` line on stderr; 75 (the service's client only) the
submission has not finished yet.

With ``--json`` (every command has it) stdout holds exactly one JSON document: the
command's result, or on a failure that has no result :func:`error_document`
(``{"ok": false, "error": {"code", "message", "hint", "origin"}, "exit_code"}``).
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from functools import wraps
from types import FrameType
from typing import Any, NoReturn, TypeVar

import click

from grader.errors import CandidateFileError, InfrastructureError, KgraderError
from sandbox.contract.codes import BY_NAME

EXIT_OK, EXIT_FAILED, EXIT_ERROR = 0, 1, 2
EXIT_PENDING = 75  # the service's client: the submission has not finished yet (EX_TEMPFAIL)
EXIT_SIGINT, EXIT_SIGTERM = 128 + signal.SIGINT, 128 + signal.SIGTERM
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
F = TypeVar("F", bound=Callable[..., Any])
_received: list[int] = []
_interrupt_note: list[str] = []


def error_origin(err: BaseException | str) -> str:
    """Whose fault a failure without a report is: ``infrastructure`` (kgrader or the
    machine), ``candidate`` (a candidate file that cannot be read) or ``usage`` (the
    caller's arguments, task, policy or paths)."""
    if isinstance(err, InfrastructureError):
        return "infrastructure"
    if isinstance(err, CandidateFileError):
        return "candidate"
    return "usage"


def exit_code_of(err: KgraderError | str, code: str | None = None) -> int:
    """The exit code of a failure without a result: its code's catalogue entry's
    (``exit_code``: 75 for ``not_finished``), else 2."""
    name = code or (err.code if isinstance(err, KgraderError) else "usage")
    entry = BY_NAME.get(name)
    return entry.exit_code if entry is not None and entry.exit_code is not None else EXIT_ERROR


def error_document(err: KgraderError | str, *, code: str | None = None,
                   origin: str | None = None, exit_code: int | None = None) -> dict[str, Any]:
    """The one JSON shape of a failure that has no result of its own."""
    if isinstance(err, KgraderError):
        message, hint, code = err.message, err.hint, code or err.code
    else:
        message, hint, code = str(err), None, code or "usage"
    return {"ok": False, "error": {"code": code, "message": message, "hint": hint,
                                   "origin": origin or error_origin(err)},
            "exit_code": exit_code_of(err, code) if exit_code is None else exit_code}


def json_requested() -> bool:
    """Whether the running command (or a group above it) was given ``--json``."""
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if ctx.params.get("as_json"):
            return True
        ctx = ctx.parent
    return False


def emit_error(err: KgraderError | str, *, code: str | None = None, origin: str | None = None,
               exit_code: int | None = None, as_json: bool | None = None) -> NoReturn:
    """Say ``err`` in one line on stderr (and, under ``--json``, as :func:`error_document`
    on stdout), then exit ``exit_code`` (default: :func:`exit_code_of`). The CLI's one map
    from a failure to its output: every command's error goes through it."""
    if exit_code is None:
        exit_code = exit_code_of(err, code)
    kind = "infrastructure error" if isinstance(err, InfrastructureError) else "error"
    if code == "internal":
        kind = "internal error"
    click.echo(f"{kind}: {err}", err=True)
    if json_requested() if as_json is None else as_json:
        click.echo(json.dumps(error_document(err, code=code, origin=origin, exit_code=exit_code),
                              indent=2, ensure_ascii=False))
    sys.exit(exit_code)


def fail(err: KgraderError | str) -> NoReturn:
    """Print one line (plus a hint, if the error has one) and exit 2, or the code's own exit
    code (75: ``not_finished``) (under ``--json`` also the error document on stdout)."""
    emit_error(err)


def json_option(f: F) -> F:
    """``--json`` for a command whose output is JSON already: it also makes a failure
    print :func:`error_document` on stdout."""
    return click.option("--json", "as_json", is_flag=True,
                        help="Print exactly one JSON document on stdout (errors too).")(f)


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


def on_interrupt_say(note: str) -> None:
    """What this command's ``interrupted:`` line says (instead of the sandbox clean-up):
    for a command that starts no sandbox, e.g. a client waiting on a server."""
    _interrupt_note.append(note)


def exit_interrupted(e: Interrupted) -> NoReturn:
    """After :class:`Interrupted` unwound: remove what is still this process's, say so in
    one line, exit 128 + the signal."""
    from grader.backends.stop import kill_own, reclaim_own

    for sig in STOP_SIGNALS:  # the last clean-up is not itself interrupted
        signal.signal(sig, signal.SIG_IGN)
    kill_own()
    left = reclaim_own()
    note = f"; removed {left} item(s) the stop cut short" if left else ""
    message = (f"interrupted: {e.name}; " + _interrupt_note[-1] if _interrupt_note else
               f"interrupted: {e.name}; stopped every sandbox this command started and "
               f"removed its folders{note}")
    click.echo(message, err=True)
    if json_requested() or "--json" in sys.argv[1:]:
        click.echo(json.dumps(error_document(message, code="interrupted",
                                             origin="usage", exit_code=e.exit_code)))
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
