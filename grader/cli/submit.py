"""``kgrader submit``, ``status``, ``report``, ``tasks``, ``cancel``: the grading service's
client (docs/service.md); ``kgrader serve`` itself is :mod:`grader.cli.service`.

The client's exit codes are ``kgrader run``'s: 0 the submission passed (``accepted``
for accept, ``ok`` for a leaderboard entry), 1 it failed or was rejected, 2 nothing was
graded (a refusal, an unreachable server, a job ``failed`` by the infrastructure or
cancelled), and 75 the submission has not finished yet (``report`` on a queued or running
job, ``submit`` whose ``--timeout`` ran out).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from grader.cli.common import (
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PENDING,
    check_outputs,
    emit_error,
    json_option,
    kgrader_errors,
    on_interrupt_say,
)
from grader.cli.progress import StepLines, steps
from grader.outpaths import OutputPathError

TOKEN_ENV = "KGRADER_TOKEN"
SERVER_ENV = "KGRADER_SERVER"
PASSED = ("passed", "accepted", "ok")


def server_options(f: Any) -> Any:
    f = click.option("--token", envvar=TOKEN_ENV, help=f"API token (or ${TOKEN_ENV}).")(f)
    return click.option("--server", envvar=SERVER_ENV, required=True,
                        help=f"Server URL (or ${SERVER_ENV}).")(f)


def _client(server: str, token: str | None) -> Any:
    from grader.service.client import Client

    return Client(server, token)


def _print_result(result: dict[str, Any], as_json: bool) -> None:
    job, rep = result["submission"], result.get("report")
    if as_json:
        click.echo(json.dumps(result))
        return
    click.echo(f"submission {job['id']}: {job['state']}"
               + (f", verdict {job['verdict']}" if job.get("verdict") is not None else "")
               + (f" ({job['error']})" if job.get("error") else ""))
    if rep is not None:
        from rich.console import Console

        from grader.report.model import Report
        from grader.report.render import render_report

        render_report(Report.model_validate(rep), Console())


def _exit(job: dict[str, Any]) -> None:
    if job["state"] in ("queued", "running"):
        sys.exit(EXIT_PENDING)
    if job["state"] != "done":
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_OK if job["verdict"] in PASSED else EXIT_FAILED)


def _say(line: str) -> None:
    click.echo(f"kgrader: {line}", err=True)


def _keeps_running(job_id: str) -> str:
    return (f"submission {job_id} keeps running on the server (nothing was stopped): "
            f"`kgrader status {job_id}` follows it, `kgrader report {job_id}` prints its "
            f"report, `kgrader cancel {job_id}` cancels it")


def _write_output(output: Path, result: dict[str, Any]) -> None:
    try:
        output.write_text(json.dumps(result, indent=2) + "\n")
    except OSError as e:
        emit_error(OutputPathError(f"cannot write --output {output}: {e.strerror or e}; the "
                                   "result was printed on stdout"), as_json=False)


@click.command()
@server_options
@click.argument("task")
@click.argument("candidate", type=click.Path(path_type=Path))
@click.option("--mode", type=click.Choice(["run", "test", "bench", "accept", "leaderboard"]),
              default="run", show_default=True,
              help="test: compile and correctness only, no benchmark.")
@click.option("--label", default="", help="A name for a leaderboard entry (letters, digits, _.-).")
@click.option("--no-wait", is_flag=True, help="Print the queued job and return.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=3600.0,
              show_default=True, help="Seconds to wait for the report (then exit 75: the job "
                                      "goes on on the server).")
@click.option("--reconnect", type=click.FloatRange(min=0), default=300.0, show_default=True,
              help="Seconds a waiting submit keeps trying a server that went away (restarted).")
@click.option("--output", type=click.Path(path_type=Path),
              help="Also write the result (submission, report, view URL) to this JSON file.")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="While waiting, the job's steps on stderr as the server's judge runs them.")
@json_option
@kgrader_errors
def submit(server: str, token: str | None, task: str, candidate: Path, mode: str, label: str,
           no_wait: bool, timeout: float, reconnect: float, output: Path | None,
           progress: bool, as_json: bool) -> None:
    """Submit CANDIDATE for TASK (a task the server names) and print its report."""
    check_outputs(files={"--output": output})
    c = _client(server, token)
    on_interrupt_say("the submission may have been queued before the stop: `kgrader status` "
                     "lists yours")
    job = c.submit_file(task, candidate, mode, label)
    view = server.rstrip("/") + job["view_url"]
    on_interrupt_say(_keeps_running(job["id"]))
    if no_wait:
        if output is not None:
            _write_output(output, {"submission": job, "report": None, "view_url": view})
        click.echo(json.dumps(job) if as_json else f"submission {job['id']} queued; view: {view}")
        return
    if not as_json:
        click.echo(f"submission {job['id']} queued; view: {view}", err=True)
    with steps("submit", enabled=progress) as lines:
        waited = c.wait(job["id"], timeout, say=_say, reconnect_s=reconnect,
                        on_event=lambda kind, data: _show_event(lines, kind, data))
    result = {**waited, "view_url": view}
    _print_result(result, as_json)
    if output is not None:
        _write_output(output, result)
    _exit(result["submission"])


def _show_event(lines: StepLines, kind: str, data: dict[str, Any]) -> None:
    """One job event as a progress step: the judge's live steps as ``kgrader run`` shows
    them, the job's own (running, requeued) with what they say."""
    fields = {k: v for k, v in data.items() if k not in ("at", "step", "task", "mode")}
    if kind == "step":
        fields.pop("attempt", None)
        lines.step(str(data.get("step", "")), fields)
    elif kind in ("running", "requeued"):
        lines.step(kind, fields)


@click.command()
@server_options
@click.argument("job_id", required=False)
@json_option
@kgrader_errors
def status(server: str, token: str | None, job_id: str | None, as_json: bool) -> None:
    """A submission's state (without JOB_ID: this token's submissions; an operator's: every
    submission, with its owner). --json: the job, or ``{"submissions": [...]}``."""
    c = _client(server, token)
    jobs = [c.job(job_id)] if job_id else c.jobs()
    if as_json:
        click.echo(json.dumps(jobs[0] if job_id else {"submissions": jobs}))
        return
    owners = any("owner" in j for j in jobs)
    for j in jobs:
        who = f"{j.get('owner', ''):<16} " if owners else ""
        click.echo(f"{j['id']}  {who}{j['task']:<20} {j['mode']:<11} {j['state']:<9} "
                   f"{j['verdict'] or ''}")


@click.command()
@server_options
@click.argument("job_id")
@json_option
@kgrader_errors
def report(server: str, token: str | None, job_id: str, as_json: bool) -> None:
    """A submission's report (exit code as ``kgrader run``'s; 75 while it is queued or
    running; 2 when cancelled or failed by the infrastructure)."""
    result = _client(server, token).report(job_id)
    job = result["submission"]
    if job["state"] in ("queued", "running"):
        if as_json:
            click.echo(json.dumps(result))
        else:
            attempt = f" (attempt {job['attempts']})" if job["state"] == "running" else ""
            click.echo(f"submission {job_id}: {job['state']}{attempt}, no report yet", err=True)
            _say(f"`kgrader status {job_id}` follows it; exit {EXIT_PENDING}: ask again later")
        sys.exit(EXIT_PENDING)
    _print_result(result, as_json)
    _exit(job)


@click.command("tasks")
@server_options
@json_option
@kgrader_errors
def tasks(server: str, token: str | None, as_json: bool) -> None:
    """The tasks the server grades, and the modes it takes."""
    listed = _client(server, token).tasks()
    if as_json:
        click.echo(json.dumps({"tasks": listed}))
        return
    for t in listed:
        click.echo(f"{t['name']:<28} {t.get('description') or ''}".rstrip())


@click.command()
@server_options
@click.argument("job_id")
@json_option
@kgrader_errors
def cancel(server: str, token: str | None, job_id: str, as_json: bool) -> None:
    """Cancel a queued submission (never graded) or a running one (its grade is not
    recorded); a finished one is refused (already_finished)."""
    out = _client(server, token).cancel(job_id)
    if as_json:
        click.echo(json.dumps(out))
        return
    click.echo(f"submission {job_id}: cancelled (it was {out['was']})")
