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
from grader.cli.common import (
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_OK,
    error_document,
    fail,
    json_option,
    kgrader_errors,
)
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


class _FormatImports(click.Group):
    """``task import <format>``: one command per format the registry offers an importer
    for (:mod:`grader.formats.registry`), each made by :func:`_import_command`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        from grader.formats import registry

        return sorted(registry.importers())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        from grader.formats import registry

        fmt = registry.importers().get(cmd_name)
        return None if fmt is None else _import_command(fmt.name)


@task_group.group("import", cls=_FormatImports)
def import_group() -> None:
    """Turn problems in the field's formats into kgrader task folders."""


_memory = click.option("--memory-mib", type=click.IntRange(min=64), default=None,
                       help="Host memory limit of the sandbox (MiB); on import it is also "
                            "written into the task's limits, for every later check and run. "
                            "Default: the task's own (4096).")


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
            _backend, _device, _memory,
            click.option("--json", "as_json", is_flag=True,
                         help="Print one JSON document: the tasks written, their notes and "
                              "quirks, and the problems not imported."),
        ]):
            f = opt(f)
        return f
    return wrap


def _import_command(name: str) -> click.Command:
    """The import command of the registered format ``name``: its help, its --policy default."""
    from grader.formats import registry

    importer = registry.get(name).importer
    assert importer is not None  # only formats with an importer are listed

    def run(path: Path, **opts: Any) -> None:
        _import_all(importer.find, importer.make, path, **opts)

    return click.command(name, help=importer.help)(_import_options(importer.policy)(run))


def _import_all(find: Callable[[Path], list[Path]], make: Callable[..., Any], path: Path, *,
                out: Path, policy: str, force: bool, verify: bool, backend: str,
                device: str, memory_mib: int | None, as_json: bool) -> None:
    from grader.formats.common import write_task
    from grader.tasks.check import verify_import

    try:
        problems = find(path)
    except KgraderError as e:
        fail(e)
    overrides = {"limits": {"memory_mib": memory_mib}} if memory_mib else None
    done: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for p in problems:
        try:
            task = make(p, policy=policy, overrides=overrides)
            if verify:
                task = verify_import(task, backend=backend, device=device)
                if device != "auto":  # where it was verified, for whoever runs it next
                    tags = [*task.spec.tags, f"verified-{device}"]
                    task.spec = task.spec.model_copy(update={"tags": tags})
            folder = write_task(task, out, force)
        except KgraderError as e:
            if len(problems) == 1 and not as_json:
                fail(e)
            if not as_json:
                click.echo(f"error: {p}: {e}", err=True)
            failed.append({"source": str(p), "error": error_document(e)["error"]})
            continue
        done.append({"source": str(p), "folder": str(folder), "task": task.spec.name,
                     "notes": list(task.notes), "quirks": [q.as_dict() for q in task.quirks]})
        if not as_json:
            click.echo(f"{p} -> {folder}")
            for line in [*task.notes, *(q.line() for q in task.quirks)]:
                click.echo(f"  {line}")
    if as_json:
        click.echo(json.dumps({"ok": not failed, "imported": done, "failed": failed}, indent=2))
    elif failed:
        click.echo(f"{len(failed)} of {len(problems)} problem(s) not imported", err=True)
    if failed:
        sys.exit(EXIT_ERROR)


@task_group.command("new")
@click.argument("name")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=Path("."),
              show_default=True)
@click.option("--force", is_flag=True, help="Replace an existing folder.")
@json_option
@kgrader_errors
def new_cmd(name: str, out: Path, force: bool, as_json: bool) -> None:
    """Scaffold a generated-shape task: task.json, reference.py, candidates/good.py."""
    from grader.tasks.scaffold import scaffold

    folder = scaffold(name, out, force)
    files = ["task.json", "reference.py", "candidates/good.py"]
    nxt = f"kgrader task check {folder} && kgrader run {folder} {folder / 'candidates' / 'good.py'}"
    if as_json:
        click.echo(json.dumps({"ok": True, "task": name, "folder": str(folder),
                               "files": files, "next": nxt}, indent=2))
        return
    click.echo(f"{folder}: {', '.join(files)}\nnext: {nxt}")


@task_group.command("check")
@click.argument("task_dir", type=click.Path(path_type=Path))
@click.option("--seed", type=int, help="Seed of the shape draw (default: a fresh secret one).")
@json_option
@_backend
@_device
@_memory
def check_cmd(task_dir: Path, seed: int | None, as_json: bool, backend: str, device: str,
              memory_mib: int | None) -> None:
    """Prove a task sound: its reference is deterministic, its tolerances hold against a
    float64 evaluation on every (drawn) shape, its cost model evaluates, every shape fits
    the memory limit; and name its quirks. Exit 0 sound, 1 not, 2 unusable."""
    from grader.formats.common import confined_task_folder
    from grader.shapes import named
    from grader.task import load_task
    from grader.tasks.check import check_task

    try:
        confined_task_folder(task_dir)
        spec, reference = load_task(task_dir)
        if memory_mib:
            spec = spec.model_copy(update={"limits": spec.limits.override(memory_mib=memory_mib)})
        rep = check_task(spec, reference, backend=backend, device=device, seed=seed)
    except KgraderError as e:
        fail(e)
    dvars = set(spec.shapes.generate.dtypes) if spec.shapes.generate else set()
    if as_json:
        click.echo(json.dumps({
            "task": rep.task, "ok": rep.ok,
            "findings": [{"ok": f.ok, "what": f.what, "detail": f.detail} for f in rep.findings],
            "quirks": [q.as_dict() for q in rep.quirks],
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
        for q in rep.quirks:
            click.echo(f"  {q.line()}")
        click.echo("sound" if rep.ok else "NOT sound")
    sys.exit(EXIT_OK if rep.ok else EXIT_FAILED)
