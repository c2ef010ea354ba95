"""``kgrader serve`` (and ``serve token add|list|revoke``): the grading service
(docs/service.md). Its client's commands (``submit``, ``status``, ``report``, ``tasks``,
``cancel``) are :mod:`grader.cli.submit`; :func:`register` adds both."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import click

from grader.backends.registry import backend_choices
from grader.cli.common import (
    STOP_SIGNALS,
    check_outputs,
    json_option,
    kgrader_errors,
)
from grader.cli.submit import cancel, report, status, submit, tasks
from grader.errors import UsageError

DB_ENV = "KGRADER_SERVICE_DB"


def register(cli: click.Group) -> None:
    """Add ``serve``, ``submit``, ``status``, ``report``, ``tasks`` and ``cancel``."""
    for cmd in (serve, submit, status, report, tasks, cancel):
        cli.add_command(cmd)


@click.group(invoke_without_command=True)
@click.option("--tasks", "tasks_dir", type=click.Path(path_type=Path),
              help="Folder of task folders: the only tasks clients may name.")
@click.option("--data", "data_dir", type=click.Path(path_type=Path), default=Path("kgrader-service"),
              show_default=True, help="The store (queue, results, tokens), board and secret.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535),
              help="TCP port (0: any free one; the startup line says which).")
@click.option("--backend", type=click.Choice(backend_choices()), default="auto", show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda", "rocm"]), default="auto",
              show_default=True)
@click.option("--workers", type=int, default=None,
              help="Workers: default one per GPU, or 1 on the CPU (on a Ray cluster: one per "
                   "GPU of the cluster, or half its CPUs).")
@click.option("--max-source-bytes", type=int, default=256 * 1024, show_default=True,
              help="A candidate larger than this is refused (413).")
@click.option("--max-attempts", type=int, default=4, show_default=True,
              help="Claims of a job whose sandbox failed before it is marked failed.")
@click.option("--retry-backoff", "retry_backoff", type=float, default=10.0, show_default=True,
              help="Seconds before a job that failed on the infrastructure is claimed again; "
                   "doubled per retry, at most 300.")
@click.option("--read-per-min", type=float, default=600.0, show_default=True,
              help="Requests per minute per token (reads and submissions).")
@click.option("--board-refresh", type=int, default=5, show_default=True,
              help="Seconds between the live board's reloads.")
@click.option("--seed-secret", type=click.Path(path_type=Path),
              help="Secret of the leaderboard entries' seeds (default: one kept in --data).")
@click.option("--warm", type=int, default=0, show_default=True,
              help="Warm sandboxes kept ready per task template (each used once, refilled "
                   "behind; ~1 GB each); 0 grades every job cold.")
@click.option("--db", envvar=DB_ENV, default=None,
              help=f"A postgresql:// URL for the store (or ${DB_ENV}); default: SQLite in --data.")
@click.option("--ray-address", default=None,
              help="Grade on this running Ray cluster (HOST:PORT or auto): one worker per GPU "
                   "of the cluster, or --workers (default half its CPUs); each job a Ray task.")
@click.option("--json", "as_json", is_flag=True,
              help="The startup and shutdown lines as JSON lines on stdout (errors: one "
                   "error document).")
@click.pass_context
@kgrader_errors
def serve(ctx: click.Context, tasks_dir: Path | None, data_dir: Path, host: str, port: int,
          backend: str, device: str, workers: int | None, max_source_bytes: int,
          max_attempts: int, retry_backoff: float, read_per_min: float, board_refresh: int,
          seed_secret: Path | None, warm: int, db: str | None, ray_address: str | None,
          as_json: bool) -> None:
    """Serve the grading API and the live board (until SIGINT/SIGTERM: a clean stop, exit
    130/143; a job being graded goes back to the queue at the next start)."""
    ctx.obj = (data_dir, db)
    if ctx.invoked_subcommand is not None:
        return
    if tasks_dir is None:
        raise UsageError("kgrader serve needs --tasks DIR (a folder of task folders)")
    from grader.service.config import ServiceConfig
    from grader.service.server import serve as run_server

    check_outputs(dirs={"--data": data_dir})  # the store, board and secret: before any work

    cfg = ServiceConfig(tasks_dir=tasks_dir, data_dir=data_dir, backend=backend, device=device,
                        workers=workers, max_source_bytes=max_source_bytes,
                        max_attempts=max_attempts, retry_backoff_s=retry_backoff,
                        read_per_min=read_per_min,
                        board_refresh_s=board_refresh, seed_secret=seed_secret, db=db,
                        warm=warm, ray_address=ray_address)

    def serving(url: str) -> None:
        if as_json:
            _json_line({"event": "serving", "url": url, "board": url + "board/",
                        "pid": os.getpid()})
        else:
            click.echo(f"kgrader serve: serving at {url} (board at {url}board/); "
                       "Ctrl-C or SIGTERM stops it", err=True)

    stopped = run_server(cfg, host, port, serving)
    for sig in STOP_SIGNALS:  # the last clean-up is not itself interrupted
        signal.signal(sig, signal.SIG_IGN)
    from grader.backends.stop import kill_own, reclaim_own

    kill_own()
    reclaim_own()
    name, code = signal.Signals(stopped.signum).name, 128 + stopped.signum
    if as_json:
        _json_line({"event": "stopped", "signal": name, "exit_code": code,
                    "stop_s": round(stopped.seconds, 2),
                    "requeued_at_next_start": stopped.running})
    else:
        left = (f"; {stopped.running} job(s) being graded go back to the queue at the next "
                "start" if stopped.running else "")
        click.echo(f"kgrader serve: stopped on {name} in {stopped.seconds:.1f} s{left}", err=True)
    sys.exit(code)


def _json_line(doc: dict[str, Any]) -> None:
    click.echo(json.dumps(doc))
    sys.stdout.flush()


def _store(ctx: click.Context, given: Path | None) -> Any:
    from grader.service.config import STORE_NAME
    from grader.service.store import Store

    data_dir, db = ctx.obj
    if db is not None:
        from grader.service.sql import is_url

        if not is_url(db):
            raise UsageError("--db must be a postgresql:// URL")
        return Store(db)
    data_dir = given if given is not None else data_dir
    check_outputs(dirs={"--data": data_dir})
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    return Store(data_dir / STORE_NAME)


@serve.group()
def token() -> None:
    """API tokens (stored hashed in --data's store)."""


def data_option(f: Any) -> Any:
    return click.option("--data", "data_dir", type=click.Path(path_type=Path), default=None,
                        help="The service's --data folder (default: serve's --data).")(f)


@token.command("add")
@click.option("--name", required=True, help="Who holds it (the board shows it).")
@click.option("--role", type=click.Choice(["submitter", "operator"]), default="submitter",
              show_default=True)
@click.option("--submit-per-min", type=float, default=30.0, show_default=True)
@click.option("--max-active", type=int, default=20, show_default=True,
              help="Jobs queued or running at once.")
@click.option("--max-per-day", type=int, default=2000, show_default=True)
@data_option
@json_option
@click.pass_context
@kgrader_errors
def token_add(ctx: click.Context, name: str, role: str, submit_per_min: float, max_active: int,
              max_per_day: int, data_dir: Path | None, as_json: bool) -> None:
    """Create a token; it is printed once and only its hash is kept."""
    from grader.service.auth import Limits, add_token

    try:
        tok, row = add_token(_store(ctx, data_dir), name, role,
                             Limits(submit_per_min, max_active, max_per_day))
    except ValueError as e:
        raise UsageError(str(e)) from None
    if as_json:
        click.echo(json.dumps({"token": tok, "id": row.id, "name": name, "role": role}))
    else:
        click.echo(tok)
        click.echo(f"(token {row.id} for {name}, role {role}: shown once, keep it secret)",
                   err=True)


@token.command("list")
@data_option
@json_option
@click.pass_context
@kgrader_errors
def token_list(ctx: click.Context, data_dir: Path | None, as_json: bool) -> None:
    """The tokens (never their secrets)."""
    rows = _store(ctx, data_dir).tokens()
    out = [{"id": r.id, "name": r.name, "role": r.role, "revoked": r.revoked,
            "submit_per_min": r.submit_per_min, "max_active": r.max_active,
            "max_per_day": r.max_per_day} for r in rows]
    if as_json:
        click.echo(json.dumps(out))
    for r in out if not as_json else []:
        click.echo(f"{r['id']}  {r['name']:<20} {r['role']:<10} "
                   f"{'revoked' if r['revoked'] else 'active'}")


@token.command("revoke")
@click.argument("token_id")
@data_option
@json_option
@click.pass_context
@kgrader_errors
def token_revoke(ctx: click.Context, token_id: str, data_dir: Path | None,
                 as_json: bool) -> None:
    """Revoke the token with id TOKEN_ID (the 12 hex after ``kgt_``)."""
    if not _store(ctx, data_dir).revoke_token(token_id):
        raise UsageError(f"no token with id {token_id!r}")
    click.echo(json.dumps({"revoked": token_id}) if as_json else f"revoked {token_id}")
