"""``kgrader records show DIR``: the trajectory of a records folder, as a table or JSON.

Wired into the main CLI by ``grader.cli`` through :func:`register`.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table

from grader.cli.common import fail
from grader.cli.progress import wide_console
from grader.records import TRAJECTORY, read_trajectory
from grader.report.verdict import improvement_speedup, ratio


def register(cli: click.Group) -> None:
    """Add the ``records`` command group (``records show``) to ``cli``."""
    cli.add_command(records)


@click.group()
def records() -> None:
    """Inspect a --records folder."""


@records.command("show")
@click.argument("directory", metavar="DIR", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the lines as a JSON array.")
def show(directory: Path, as_json: bool) -> None:
    """Show DIR's trajectory: one row per acceptance decision."""
    if not directory.is_dir():
        fail(f"records folder not found: {directory}")
    entries = read_trajectory(directory)
    if as_json:
        click.echo(json.dumps([e.to_json() for e in entries], indent=2, ensure_ascii=False))
        return
    table = Table(title=f"{directory / TRAJECTORY} ({len(entries)} decisions)")
    for col in ("time", "task", "candidate", "accepted", "speed-up", "rule", "folder"):
        table.add_column(col, no_wrap=col in ("time", "candidate"))
    for e in entries:
        # the median paired speed-up over the best, a ratio like the report's headline
        # (an improvement fraction of -17.09 is "0.0553x", never "-1709%")
        s = improvement_speedup(e.improvement_fraction)
        imp = "—" if s is None else f"{ratio(s)}x"
        table.add_row(
            e.time, e.task or "—", e.candidate_sha256[:12],
            "[green]yes[/]" if e.accepted else "[red]no[/]",
            imp, e.rule or "—", e.folder,
        )
    wide_console().print(table)
