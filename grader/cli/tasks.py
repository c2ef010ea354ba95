"""``kgrader task``: import problems from the field's formats, scaffold a task, check one.

Exit codes: 0 done (``check``: the task is sound); 1 ``check`` found the task unsound; 2
unusable input (no such file, not a problem, invalid task) or an infrastructure fault,
with a one-line ``error:`` on stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from grader.backends.registry import backend_choices
from grader.cli.common import EXIT_ERROR, EXIT_FAILED, EXIT_OK, fail, kgrader_errors
from grader.errors import KgraderError

_backend = click.option("--backend", type=click.Choice(backend_choices()), default="auto",
                        show_default=True)
_device = click.option("--device", type=click.Choice(["auto", "cpu", "cuda", "rocm"]),
                       default="auto", show_default=True)


def register(cli: click.Group) -> None:
    cli.add_command(task_group)


@click.group("task")
def task_group() -> None:
    """Make and vet tasks: import from KernelBench / GPU MODE, scaffold, check."""


@task_group.group("import")
def import_group() -> None:
    """Turn problems in the field's formats into kgrader task folders."""


def _import_options(policy: str) -> Callable[[Any], Any]:
    def wrap(f: Any) -> Any:
        for opt in reversed([
            click.argument("path", type=click.Path(path_type=Path)),
            click.option("--out", type=click.Path(path_type=Path, file_okay=False),
                         default=Path("."), show_default=True, help="Folder for the task folders."),
            click.option("--policy", default=policy, show_default=True,
                         help="Policy the imported tasks name."),
            click.option("--force", is_flag=True, help="Replace existing task folders."),
            click.option("--verify/--no-verify", default=True, show_default=True,
                         help="Run the reference on every shape in the sandbox; drop hidden "
                              "shapes it cannot run."),
            _backend, _device,
        ]):
            f = opt(f)
        return f
    return wrap


@import_group.command("kernelbench")
@_import_options("cuda-inline")
def import_kernelbench(path: Path, out: Path, policy: str, force: bool, verify: bool,
                       backend: str, device: str) -> None:
    """KernelBench problem files (FILE or a folder of them): Model, get_inputs,
    get_init_inputs, size constants. Submissions define ModelNew."""
    from grader.tasks import kernelbench

    _import_all(kernelbench.find_problems, kernelbench.import_problem, path, out, policy, force,
                verify, backend, device)


@import_group.command("gpumode")
@_import_options("default")
def import_gpumode(path: Path, out: Path, policy: str, force: bool, verify: bool,
                   backend: str, device: str) -> None:
    """GPU MODE problem folders (reference.py + task.yml, or a folder of them).
    Submissions define custom_kernel(data)."""
    from grader.tasks import gpumode

    _import_all(gpumode.find_problems, gpumode.import_problem, path, out, policy, force,
                verify, backend, device)


def _import_all(find: Callable[[Path], list[Path]], make: Callable[..., Any], path: Path,
                out: Path, policy: str, force: bool, verify: bool, backend: str,
                device: str) -> None:
    from grader.tasks.check import verify_import
    from grader.tasks.common import write_task

    try:
        problems = find(path)
    except KgraderError as e:
        fail(e)
    failed = 0
    for p in problems:
        try:
            task = make(p, policy=policy)
            if verify:
                task = verify_import(task, backend=backend, device=device)
            folder = write_task(task, out, force)
        except KgraderError as e:
            if len(problems) == 1:
                fail(e)
            click.echo(f"error: {p}: {e}", err=True)
            failed += 1
            continue
        click.echo(f"{p} -> {folder}")
        for note in task.notes:
            click.echo(f"  {note}")
    if failed:
        click.echo(f"{failed} of {len(problems)} problem(s) not imported", err=True)
        sys.exit(EXIT_ERROR)


@task_group.command("new")
@click.argument("name")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=Path("."),
              show_default=True)
@click.option("--force", is_flag=True, help="Replace an existing folder.")
@kgrader_errors
def new_cmd(name: str, out: Path, force: bool) -> None:
    """Scaffold a generated-shape task: task.json, reference.py, candidates/good.py."""
    from grader.tasks.scaffold import scaffold

    folder = scaffold(name, out, force)
    click.echo(f"{folder}: task.json, reference.py, candidates/good.py\n"
               f"next: kgrader task check {folder} && kgrader run {folder} "
               f"{folder / 'candidates' / 'good.py'}")


@task_group.command("check")
@click.argument("task_dir", type=click.Path(path_type=Path))
@click.option("--seed", type=int, help="Seed of the shape draw (default: a fresh secret one).")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@_backend
@_device
def check_cmd(task_dir: Path, seed: int | None, as_json: bool, backend: str, device: str) -> None:
    """Prove a task sound: its reference is deterministic, its tolerances hold against a
    float64 evaluation on every (drawn) shape, its cost model evaluates, every shape fits
    the memory limit. Exit 0 sound, 1 not, 2 unusable."""
    from grader.shapes import named
    from grader.task import load_task
    from grader.tasks.check import check_task
    from grader.tasks.common import confined_task_folder

    try:
        confined_task_folder(task_dir)
        spec, reference = load_task(task_dir)
        rep = check_task(spec, reference, backend=backend, device=device, seed=seed)
    except KgraderError as e:
        fail(e)
    dvars = set(spec.shapes.generate.dtypes) if spec.shapes.generate else set()
    if as_json:
        click.echo(json.dumps({
            "task": rep.task, "ok": rep.ok,
            "findings": [{"ok": f.ok, "what": f.what, "detail": f.detail} for f in rep.findings],
            "drawn": None if rep.drawn is None else {
                "tune": [named(b, dvars) for b in rep.drawn.tune],
                "hidden": [named(b, dvars) for b in rep.drawn.hidden],
                "probes": rep.drawn.probes},
            "shapes": rep.shapes}, indent=2))
    else:
        click.echo(f"task {rep.task}")
        if rep.drawn is not None:
            click.echo(f"  drawn tune:   {[named(b, dvars) for b in rep.drawn.tune]}")
            for b, why in zip(rep.drawn.hidden, rep.drawn.probes, strict=True):
                click.echo(f"  drawn hidden: {named(b, dvars)}  ({why})")
        for f in rep.findings:
            click.echo(f"  {'ok  ' if f.ok else 'FAIL'}  {f.what}" + (f": {f.detail}" if f.detail else ""))
        click.echo("sound" if rep.ok else "NOT sound")
    sys.exit(EXIT_OK if rep.ok else EXIT_FAILED)
