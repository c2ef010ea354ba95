"""The ``kgrader`` command line. Thin: parses arguments, calls the API, prints.

Exit codes (docs/cli.md): 0 every stage reached passed (and, with ``--current``,
accepted); 1 the candidate failed or was rejected; 2 nothing was graded (usage,
infrastructure, a candidate file that cannot be read); 130/143 interrupted by
SIGINT/SIGTERM (``grader.cli.common``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from grader import __version__
from grader.backends.registry import backend_choices
from grader.cli.common import (
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_OK,
    Interrupted,
    check_outputs,
    emit_error,
    error_document,
    exit_interrupted,
    fail,
    json_option,
    received_stop,
    stop_on_signals,
    sweep_orphans,
)
from grader.cli.progress import steps, tell_judge_steps, wide_console
from grader.errors import KgraderError
from grader.limits import Limits
from grader.logs import LOG_FORMATS, LOG_LEVELS
from grader.logs import configure as configure_logs
from grader.report.model import Report, report_json_schema


def exit_code(report: Report) -> int:
    """0 passed, 1 the candidate failed or was rejected, 2 only for infrastructure faults."""
    if report.ok:
        return EXIT_OK
    return EXIT_ERROR if report.infrastructure_failed() else EXIT_FAILED


# The commands each module of grader.cli registers (its ``register(group)``), by name. A
# module is imported when one of its commands is asked for, never before: every command
# pays only its own imports (``kgrader run`` no longer imported the service, the leaderboard,
# the agent tools and the docker SDK before starting its sandbox). ``--help`` lists the
# names, then loads each module for its one-line help.
LAZY_COMMANDS: dict[str, str] = {
    "profile": "grader.cli.diagnostics", "image": "grader.cli.docker",
    "sandbox": "grader.cli.docker", "experience": "grader.cli.experience",
    "leaderboard": "grader.cli.leaderboard", "records": "grader.cli.records",
    "replay": "grader.cli.replay", "policy": "grader.cli.scan", "scan": "grader.cli.scan",
    "serve": "grader.cli.service", "submit": "grader.cli.service", "status": "grader.cli.service",
    "report": "grader.cli.service", "tasks": "grader.cli.service", "cancel": "grader.cli.service",
    "task": "grader.cli.tasks", "accept": "grader.cli.tools", "bench": "grader.cli.tools",
    "calibrate": "grader.cli.tools", "compile": "grader.cli.tools", "mcp": "grader.cli.tools",
    "tool": "grader.cli.tools", "tools": "grader.cli.tools", "workspace": "grader.cli.tools",
}


class LazyGroup(click.Group):
    """A group whose commands in :data:`LAZY_COMMANDS` are registered on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY_COMMANDS:
            load_commands(self, LAZY_COMMANDS[cmd_name])
        return self.commands.get(cmd_name)


def load_commands(group: click.Group, module: str) -> None:
    """Register ``module``'s commands (a module of grader.cli) on ``group``."""
    import importlib

    importlib.import_module(module).register(group)


def all_commands(group: click.Group) -> dict[str, click.Command]:
    """Every top-level command, each module loaded (docs, tests, completion of all names)."""
    ctx = click.Context(group)
    return {name: cmd for name in group.list_commands(ctx)
            if (cmd := group.get_command(ctx, name)) is not None}


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kgrader")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), default=None,
              help="Events at this level and above go to stderr (default: $KGRADER_LOG, "
                   "else warning).")
@click.option("--log-format", type=click.Choice(LOG_FORMATS), default=None,
              help="json: one JSON object per line; console: for people (default: json "
                   "when stderr is not a terminal; $KGRADER_LOG_FORMAT).")
def main(log_level: str | None, log_format: str | None) -> None:
    """kgrader: sandboxed, reproducible grading of untrusted GPU kernel code.

    Every command takes --json (one JSON document on stdout, errors included); exit codes,
    progress, logging and shell completion are in docs/cli.md.
    """
    if log_level is not None or log_format is not None:
        configure_logs(log_level, log_format)


def limit_options(f: Any) -> Any:
    """One ``--<field>`` option per :class:`Limits` field, typed and described by the model,
    so a new limit reaches the command line without touching it."""
    for name, info in reversed(list(Limits.model_fields.items())):
        ann = info.annotation
        # The model's bounds are the option's range: a value out of it is a usage error that
        # names the option (it was an "internal error" from the model's validation).
        bound = {k: getattr(m, k) for m in info.metadata for k in ("gt", "ge", "lt", "le")
                 if getattr(m, k, None) is not None}
        typ: click.FloatRange | click.IntRange = (click.FloatRange if ann in (float, float | None) else click.IntRange)(
            min=bound.get("gt", bound.get("ge")), max=bound.get("lt", bound.get("le")),
            min_open="gt" in bound, max_open="lt" in bound)
        default = info.default
        text = f"{info.description or name} (task default; model default {default})."
        f = click.option("--" + name.replace("_", "-"), name, type=typ, default=None, help=text)(f)
    return f


@main.command()
@click.argument("task_dir", type=click.Path(path_type=Path))
@click.argument("candidate", type=click.Path(path_type=Path))
@click.option("--current", type=click.Path(path_type=Path), help="Current best: run the acceptance stage.")
@click.option("--backend", type=click.Choice(backend_choices()), default="auto", show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda", "rocm"]), default="auto", show_default=True)
@click.option("--policy", help="Policy name or path (default: the task's).")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one report JSON on stdout.")
@click.option("--out", type=click.Path(path_type=Path), help="Also write report.json into this folder.")
@click.option("--records", type=click.Path(path_type=Path), help="Keep the evaluation in a records folder.")
@click.option("--gpu", "gpus", multiple=True, help="GPU id or UUID to expose (repeatable).")
@click.option("--sanitize", is_flag=True,
              help="Run the correctness stage under compute-sanitizer (memcheck, or the task's "
                   "tool); timing runs without it. GPU only: on the CPU a warning, not a failure.")
@click.option("--sanitize-tool", type=click.Choice(["memcheck", "racecheck", "none"]), default=None,
              help="The compute-sanitizer tool (implies --sanitize; 'none' turns the task's off).")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Steps on stderr: a live line on a terminal, one line per step otherwise.")
@limit_options
def run(task_dir: Path, candidate: Path, current: Path | None, backend: str, device: str,
        policy: str | None, as_json: bool, out: Path | None, records: Path | None,
        gpus: tuple[str, ...], sanitize: bool, sanitize_tool: str | None, progress: bool,
        **limits: Any) -> None:
    """Grade CANDIDATE against the task in TASK_DIR."""
    from grader.evaluate import EvalRequest, evaluate

    try:
        evals = None
        if records is not None:  # the records store (filelock) only for a run that keeps one
            from grader.records import EVALS

            evals = records / EVALS
        check_outputs(dirs={"--out": out, "--records": records, "--records folder": evals},
                      files={"--out report.json": out / "report.json" if out else None})
        tool = sanitize_tool or ("default" if sanitize else None)  # default: the task's or memcheck
        req = EvalRequest.from_paths(task_dir, candidate, current, limits=limits, backend=backend,
                                     device=device, policy=policy, gpu_ids=gpus, sanitize=tool)
        sweep_orphans()
        with steps("run", enabled=progress) as lines:
            lines.step("scan", {"task": req.task.name, "candidate": candidate.name})
            report = evaluate(req)
            if report.sandbox is not None:
                tell_judge_steps(lines, report.sandbox.phases)
            lines.step("done", {"ok": str(report.ok).lower(), "stage": report.stage})
        unsaved = _save(report, out, records, task_dir, req)
    except KgraderError as e:
        fail(e)
        return
    if as_json:
        click.echo(report.model_dump_json())
    else:
        from grader.report.render import render_report

        render_report(report, wide_console())
    if unsaved:
        _keep_unsaved(report, unsaved)
    sys.exit(exit_code(report))


def _save(report: Report, out: Path | None, records: Path | None, task_dir: Path,
          req: Any) -> list[str]:
    """Write the report where asked; what failed, one message per destination (the
    report is then printed anyway and kept by :func:`_keep_unsaved`)."""
    failed = []
    if out is not None:  # first: the report survives a records folder that fails
        try:
            _write_report(out, report)
        except KgraderError as e:
            failed.append(str(e))
    if records is not None:
        from grader.experience.hooks import remember_records_folder
        from grader.records import Records

        try:
            rec = Records(records)
            folder = rec.new_evaluation(task_dir, req.candidate.text,
                                        req.current.text if req.current else None)
            entry = rec.finish(folder, report,
                               report.acceptance.accepted if report.acceptance else None)
        except (KgraderError, OSError) as e:
            failed.append(f"--records {records}: cannot record the evaluation: {e}")
        else:  # after the commit point: the store's time never delays the decision
            remember_records_folder(folder, report, entry.accepted if entry else None, origin="run")
    return failed


def _keep_unsaved(report: Report, unsaved: list[str]) -> None:
    """The grade is done but a destination refused it: it is on stdout already; keep it
    in a fallback file too, say both paths, exit 2 (docs/cli.md, "Nothing finished is lost")."""
    from grader.outpaths import save_unsaved, unsaved_folders

    kept = save_unsaved(report.model_dump_json(indent=2).encode("utf-8"), "report")
    where = (f"saved to {kept}" if kept is not None else
             "no fallback file could be written either (tried "
             + ", ".join(str(f) for f in unsaved_folders()) + ")")
    click.echo(f"error: {'; '.join(unsaved)}; the finished report is on stdout and {where}",
               err=True)
    sys.exit(EXIT_ERROR)


def _write_report(out: Path, report: Report) -> None:
    from grader.durable import atomic_write
    from grader.errors import UsageError

    try:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / "report.json", report.model_dump_json(indent=2).encode("utf-8"))
    except OSError as e:
        raise UsageError(f"--out {out}: cannot write report.json: {e}") from None


@main.command()
@json_option
def schema(as_json: bool) -> None:
    """Print the report's JSON Schema (JSON always)."""
    click.echo(json.dumps(report_json_schema(), indent=2))


def entry() -> None:
    """Console entry point: no raw traceback ever reaches the user (KGRADER_DEBUG=1 shows it)."""
    import os

    stop_on_signals()
    try:
        rv = main(standalone_mode=False)
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)
    except click.ClickException as e:  # click's own usage errors: exit 2, JSON too
        e.show()
        if "--json" in sys.argv[1:]:
            click.echo(json.dumps(error_document(e.format_message(), code="usage",
                                                 exit_code=e.exit_code)))
        sys.exit(e.exit_code)
    except click.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(EXIT_FAILED)
    except Interrupted as e:
        exit_interrupted(e)
    except BaseException as e:
        # After a stop signal every way out is the interrupted one: an exit the command
        # made on its own, the Stopped error of a refused sandbox, or the Interrupted
        # wrapped in an exception group by a library's task group (the MCP server's).
        stopped = received_stop()
        if stopped is not None:
            exit_interrupted(stopped)
        if isinstance(e, KgraderError):
            emit_error(e, as_json="--json" in sys.argv[1:])
        if not isinstance(e, Exception) or os.environ.get("KGRADER_DEBUG"):
            raise
        # a kgrader bug: say so in one line, exit 2
        emit_error(f"{type(e).__name__}: {e} (set KGRADER_DEBUG=1 for the traceback)",
                   code="internal", origin="infrastructure", as_json="--json" in sys.argv[1:])


if __name__ == "__main__":
    entry()
