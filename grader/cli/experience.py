"""CLI for the experience store: ``kgrader experience query|add|stats``.

Thin: parses arguments, calls :mod:`grader.experience`, prints. Exit codes: 0 done (a
query that finds nothing is done too); 2 unusable input (bad ``--dim``, a missing or
corrupt store, a newer schema) with one ``error:`` line on stderr, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from grader.cli.common import fail, kgrader_errors
from grader.cli.progress import wide_console
from grader.experience.lessons import lesson, one_line

F = TypeVar("F", bound=Callable[..., Any])


def register(cli: click.Group) -> None:
    """Add the ``experience`` command group."""
    cli.add_command(experience_group)


def _console() -> Console:
    return wide_console()


def _cell(value: Any, limit: int = 120) -> Text:
    # Text, not markup: stored messages are untrusted and contain brackets.
    return Text(one_line("" if value is None else str(value), limit))


_db_opt = click.option("--db", type=click.Path(path_type=Path),
                       help="Store file (default: $KGRADER_EXPERIENCE or "
                            "~/.cache/kgrader/experience.sqlite).")


@click.group("experience")
def experience_group() -> None:
    """The experience store: every grade kept, queryable, with lessons."""


@experience_group.command("query")
@click.option("--task", help="Only this task name.")
@click.option("--tag", "tags", multiple=True, help="Only this op family/tag (repeatable: all must hold).")
@click.option("--stage", type=click.Choice(["scan", "sandbox", "compile", "correctness", "benchmark",
                                            "accept"]), help="Only attempts whose last stage reached is this.")
@click.option("--code", help="Only attempts with this error code (e.g. wrong_values).")
@click.option("--failed", "outcome", flag_value="failed", help="Only failed attempts.")
@click.option("--passed", "outcome", flag_value="passed", help="Only passing attempts.")
@click.option("--hardware", help="Substring of the hardware text (e.g. H200, 'torch 2.13').")
@click.option("--here", is_flag=True,
              help="Only attempts on this machine's device (kind, name and CPU model).")
@click.option("--dim", "dims", multiple=True,
              help="Shape filter, all met by one shape: 'N>=1024', 'N=512..2048', '64<=M<4096'.")
@click.option("--text", help="Words that must all occur in messages, diagnostics or source.")
@click.option("--origin", type=click.Choice(["run", "tool", "leaderboard"]))
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--recent", is_flag=True, help="Newest first instead of the ranking.")
@click.option("--source", "with_source", is_flag=True, help="Include each attempt's source in --json.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
@_db_opt
@kgrader_errors
def query_cmd(task: str | None, tags: tuple[str, ...], stage: str | None, code: str | None,
              outcome: str | None, hardware: str | None, here: bool, dims: tuple[str, ...],
              text: str | None,
              origin: str | None, limit: int, recent: bool, with_source: bool, as_json: bool,
              db: Path | None) -> None:
    """Past attempts matching every filter, best first (or --recent)."""
    from grader.experience import ExperienceStore, Query, parse_dim
    from grader.experience.search import current_hardware_key, hit_json

    key = None
    if here:
        key = current_hardware_key("auto", "auto")
        if key is None:
            fail("cannot tell this machine's device (--here); use --hardware SUBSTR")
    q = Query(task=task, tags=tags, stage=stage, code=code, outcome=outcome,  # type: ignore[arg-type]
              hardware=hardware, hardware_key=key, dims=tuple(parse_dim(d) for d in dims), text=text,
              origin=origin, limit=limit, recent=recent).validate()
    with ExperienceStore.open(db, create=False) as store:
        hits = store.query(q)
        text_search = "fts5" if store.fts else "like"
        path = store.path
    if as_json:
        click.echo(json.dumps({"store": str(path), "text_search": text_search, "count": len(hits),
                               "results": [hit_json(h, include_source=with_source) for h in hits]},
                              indent=2, ensure_ascii=False))
        return
    table = Table(title=f"{len(hits)} attempt(s) from {path}")
    for col in ("id", "when", "task", "stage", "verdict", "code", "median ms", "lesson"):
        table.add_column(col)
    for h in hits:
        a = h.attempt
        verdict = "passed" if a.ok else "failed"
        if a.accepted is not None:
            verdict = "accepted" if a.accepted else "rejected"
        table.add_row(_cell(h.id), _cell(a.created_at[:19]), _cell(a.task), _cell(a.stage),
                      _cell(verdict), _cell(a.first_error.code if a.first_error else ""),
                      _cell(f"{a.median_ms:.4g}" if a.median_ms is not None else ""),
                      _cell(lesson(a), 300))
    _console().print(table)


@experience_group.command("add")
@click.argument("sources", nargs=-1, required=True, metavar="RECORDS_DIR|LEADERBOARD_STATE.sqlite...",
                type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print what was imported as JSON.")
@_db_opt
@kgrader_errors
def add_cmd(sources: tuple[Path, ...], as_json: bool, db: Path | None) -> None:
    """Import finished evaluations from records folders or leaderboard state files."""
    from grader.experience import ExperienceStore
    from grader.experience.importers import import_path

    with ExperienceStore.open(db, create=True) as store:
        summaries = [import_path(store, p) for p in sources]
        path = store.path
    if as_json:
        click.echo(json.dumps({"store": str(path), "imports": [s.as_json() for s in summaries]},
                              indent=2, ensure_ascii=False))
        return
    for s in summaries:
        click.echo(f"{s.source} ({s.kind}): {s.added} added, {s.duplicates} already stored, "
                   f"{len(s.skipped)} skipped")
        for why in s.skipped[:20]:
            click.echo(f"  skipped {one_line(why, 300)}")
    click.echo(f"store: {path}")


@experience_group.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@_db_opt
@kgrader_errors
def stats_cmd(as_json: bool, db: Path | None) -> None:
    """Counts: attempts, passed/failed, by origin, task, tag, failing stage, error code, hardware."""
    from grader.experience import ExperienceStore

    with ExperienceStore.open(db, create=False) as store:
        stats = store.stats()
    if as_json:
        click.echo(json.dumps(stats, indent=2, ensure_ascii=False))
        return
    console = _console()
    console.print(Text(f"{stats['path']}: {stats['attempts']} attempts ({stats['passed']} passed, "
                       f"{stats['failed']} failed); schema {stats['schema_version']}, text search "
                       f"{stats['text_search']}"))
    for key in ("by_origin", "by_task", "by_tag", "failed_by_stage", "by_error_code", "by_hardware"):
        if not stats[key]:
            continue
        table = Table(title=key.replace("_", " "))
        table.add_column("value")
        table.add_column("count", justify="right")
        for name, n in stats[key].items():
            table.add_row(_cell(name), _cell(n))
        console.print(table)
