"""``kgrader leaderboard``: batch runs (run), the static page (render), and a demo.

Exit codes: 0 the batch finished (whatever the submissions' verdicts); 2 usage or
infrastructure error, including evaluations that hit an infrastructure fault (they
were not recorded and are retried by running the same command again), and a --state
another run holds; 130/143 interrupted (nothing left running; the same command resumes).
With ``--json``: one JSON document on stdout (the run's summary, the page's path, or
the error), progress on stderr as without it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import click

from grader.backends.registry import backend_choices
from grader.cli.common import check_outputs, fail
from grader.errors import KgraderError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEMO_TASKS = ("vector_add_small", "softmax", "matmul")
_json_opt = click.option("--json", "as_json", is_flag=True,
                         help="Print one JSON document on stdout (errors too).")


def _print_summary(summary: Any) -> None:
    for m in summary.messages:
        click.echo(f"note: {m}", err=True)
    for m in summary.infra_errors:
        click.echo(f"infrastructure error: {m}", err=True)
    click.echo(f"evaluated {summary.evaluated}, already done {summary.skipped_done}; "
               f"usable tasks: {', '.join(summary.usable_tasks) or 'none'}; "
               f"re-run top: {', '.join(repr(t) for t in summary.top) or 'none'}", err=True)


def _run(as_json: bool = False, progress: bool = True, keep_going: bool = False,
         **kw: Any) -> dict[str, Any]:
    """Run the batch; exit 2 on infrastructure errors unless ``keep_going`` (the caller
    then reads ``doc["ok"]``)."""
    from grader.cli.board_progress import BoardLines
    from grader.experience.hooks import remember_leaderboard
    from grader.leaderboard.runner import RunConfig, run_leaderboard

    def remember(job: Any, row: Any, local: bool) -> None:  # every committed job, kept
        remember_leaderboard(job, row, local=local)

    try:
        summary = run_leaderboard(RunConfig(**kw), progress=BoardLines(enabled=progress),
                                  on_committed=remember)
    except KgraderError as e:
        fail(e)
    _print_summary(summary)
    doc = {"ok": not summary.infra_errors, "state": str(kw["state"]),
           **dataclasses.asdict(summary)}
    if summary.infra_errors and not keep_going:
        if as_json:
            click.echo(json.dumps(doc, indent=2, ensure_ascii=False))
        sys.exit(2)
    return doc


def _demo_secret(out_dir: Path) -> Path:
    """The demo's seed secret, kept in OUT_DIR (0600, made once): running the demo again
    resumes its state on the same secret seeds."""
    import os
    import secrets

    path = out_dir / "seed-secret"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path


def _engine_options(f: Any) -> Any:
    opts = [
        click.option("--state", type=click.Path(path_type=Path), default=Path("leaderboard.sqlite"),
                     show_default=True, help="SQLite state file (resumable)."),
        click.option("--workers", type=int, default=None,
                     help="Parallel evaluations (default: one per GPU, else one per two "
                          "CPU cores)."),
        click.option("--engine", type=click.Choice(["local", "ray"]), default="local",
                     show_default=True),
        click.option("--backend", type=click.Choice(backend_choices()), default="auto",
                     show_default=True),
        click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
                     show_default=True),
        click.option("--ray-address", default="auto", show_default=True,
                     help="Ray cluster address for --engine ray."),
        click.option("--seed-secret", type=click.Path(path_type=Path), default=None,
                     help="File with the operator's secret for correctness seeds "
                          "(else $KGRADER_LEADERBOARD_SECRET, else random per run)."),
        click.option("--top-k", type=int, default=3, show_default=True,
                     help="Entries re-run on fresh seeds before publishing."),
        click.option("--prepare-ahead/--no-prepare-ahead", default=False, show_default=True,
                     help="GPU workers: start the next evaluation's sandbox (torch import, "
                          "runners) while the current one measures; it touches the GPU only "
                          "after the current sandbox is dead (docs/leaderboard.md)."),
        click.option("--progress/--no-progress", default=True, show_default=True,
                     help="Progress on stderr: a bar on a terminal, a line per evaluation "
                          "otherwise."),
        _json_opt,
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def register(cli: click.Group) -> None:
    """Add the ``leaderboard`` group to the main CLI."""

    @cli.group()
    def leaderboard() -> None:
        """Grade many submissions on many tasks and publish a ranking."""

    @leaderboard.command("run")
    @click.option("--tasks", "tasks", type=click.Path(path_type=Path), multiple=True,
                  required=True, help="Task folder (repeatable; or several after one --tasks).")
    @click.option("--submissions", type=click.Path(path_type=Path), required=True,
                  help="Folder of submissions: <name>/<task_name>.py.")
    @_engine_options
    @click.argument("more_tasks", nargs=-1, type=click.Path(path_type=Path))
    def run_cmd(tasks: tuple[Path, ...], more_tasks: tuple[Path, ...], as_json: bool,
                **kw: Any) -> None:
        """Evaluate every submission on every task (resumes from --state)."""
        doc = _run(tasks=[*tasks, *more_tasks], as_json=as_json, **kw)
        if as_json:
            click.echo(json.dumps(doc, indent=2, ensure_ascii=False))

    @leaderboard.command("render")
    @click.argument("state", type=click.Path(path_type=Path))
    @click.argument("out_dir", type=click.Path(path_type=Path))
    @click.option("--private", is_flag=True,
                  help="The operator's own page: hidden shapes and full messages kept. "
                       "Never publish it.")
    @_json_opt
    def render_cmd(state: Path, out_dir: Path, private: bool, as_json: bool) -> None:
        """Write the static site for STATE into OUT_DIR (hidden shapes redacted)."""
        from grader.leaderboard.render import render_site

        try:
            check_outputs(dirs={"OUT_DIR": out_dir})
            index = render_site(state, out_dir, private=private)
        except KgraderError as e:
            fail(e)
        if as_json:
            click.echo(json.dumps({"ok": True, "index": str(index), "state": str(state),
                                   "private": private}, indent=2))
        else:
            click.echo(str(index))

    @leaderboard.command("demo")
    @click.argument("out_dir", type=click.Path(path_type=Path))
    @click.option("--workers", type=int, default=None,
                  help="Parallel evaluations (default: one per GPU, else one per two CPU "
                       "cores). Evaluations that hit an infrastructure fault are retried "
                       "twice before the page is written.")
    @click.option("--backend", type=click.Choice(backend_choices()), default="auto")
    @click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto")
    @click.option("--progress/--no-progress", default=True, show_default=True,
                  help="Progress on stderr: a bar on a terminal, a line per evaluation "
                       "otherwise.")
    @_json_opt
    def demo_cmd(out_dir: Path, workers: int, backend: str, device: str, progress: bool,
                 as_json: bool) -> None:
        """Run the examples/leaderboard submissions and render the page into OUT_DIR."""
        from grader.leaderboard.render import render_site

        subs = EXAMPLES / "leaderboard" / "submissions"
        if not subs.is_dir():
            fail(f"demo submissions not found at {subs} (run from a source checkout)")
        state = out_dir / "leaderboard.sqlite"
        try:  # before any grading: a page that cannot be written must not cost the batch
            check_outputs(dirs={"OUT_DIR": out_dir, "OUT_DIR/site": out_dir / "site"},
                          files={"OUT_DIR/leaderboard.sqlite": state})
        except KgraderError as e:
            fail(e)
        out_dir.mkdir(parents=True, exist_ok=True)
        doc = _run(tasks=[EXAMPLES / t for t in DEMO_TASKS], submissions=subs, state=state,
                   workers=workers, engine="local", backend=backend, device=device,
                   ray_address="auto", seed_secret=_demo_secret(out_dir), top_k=3,
                   infra_retries=2,
                   as_json=as_json, progress=progress, keep_going=True)
        try:
            index = render_site(state, out_dir / "site")
        except KgraderError as e:
            fail(e)
        if as_json:
            click.echo(json.dumps({**doc, "index": str(index)}, indent=2, ensure_ascii=False))
        else:
            click.echo(str(index))
        if not doc["ok"]:  # the page lists them as pending; the same command retries them
            sys.exit(2)
