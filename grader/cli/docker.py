"""Sandbox maintenance commands: ``kgrader image build`` and ``kgrader sandbox cleanup``.

:func:`register` adds them to the main ``kgrader`` group; the module also runs on its own
(:func:`_standalone`, which ``scripts/docker-setup.sh`` calls) so that the image builds
before the package is installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from grader.backends.docker.images import FLAVORS, BuildRequest, Flavor, build_image
from grader.cli.common import fail
from grader.errors import KgraderError


@click.group("image")
def image_group() -> None:
    """Sandbox images (built locally; kgrader never pulls)."""


@image_group.command("build")
@click.option("--flavor", type=click.Choice(FLAVORS), default="cuda", show_default=True)
@click.option("--base", default=None, help="BASE_IMAGE build arg (cpu: kgrader/base:bookworm).")
@click.option("--tag", default=None, help="Image tag (default: kgrader/<flavor>:latest).")
@click.option(
    "--wheels",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Directory of wheels (torch, triton, numpy, deps) to install into the image.",
)
@click.option("--force", is_flag=True, help="Rebuild even when the content hash matches.")
@click.option("--pull", "allow_pull", is_flag=True, help="Let docker pull a missing base.")
@click.option("--quiet", "-q", is_flag=True, help="Do not stream build output.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the result as one JSON document (build output goes to stderr).")
def build_cmd(
    flavor: Flavor,
    base: str | None,
    tag: str | None,
    wheels: Path | None,
    force: bool,
    allow_pull: bool,
    quiet: bool,
    as_json: bool,
) -> None:
    """Build the sandbox image for FLAVOR (skipped when already up to date)."""
    req = BuildRequest(
        flavor=flavor, base=base, tag=tag, wheels=wheels, force=force, allow_pull=allow_pull
    )

    def progress(line: str) -> None:
        if not quiet:
            click.echo(f"  {line}", err=as_json)

    try:
        result = build_image(req, progress)
    except KgraderError as exc:
        fail(exc)
    state = "up to date" if result.skipped else "built"
    if as_json:
        click.echo(json.dumps({"ok": True, "tag": result.tag, "state": state,
                               "image_id": result.image_id,
                               "content_hash": result.content_hash}, indent=2))
        return
    click.echo(
        f"{result.tag}: {state} ({result.image_id[:19]}, content {result.content_hash[:12]})"
    )


@click.group("sandbox")
def sandbox_group() -> None:
    """Sandbox maintenance."""


@sandbox_group.command("cleanup")
@click.option(
    "--all", "include_live", is_flag=True,
    help="Also remove what belongs to kgrader processes still running (and unmarked folders).",
)
@click.option(
    "--temp-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Where evaluation folders live (default: the temp dir).",
)
@click.option("--no-docker", is_flag=True, help="Do not look for containers.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def cleanup_cmd(include_live: bool, temp_dir: Path | None, no_docker: bool, as_json: bool) -> None:
    """Reclaim what killed kgrader processes left behind.

    Evaluation folders (kgrader-eval-*, kgrader-mode-*, kgrader-scratch-* in the temp
    dir), containers labelled kgrader=1, and bwrap cgroups, whose owning process no longer
    runs on this host. What belongs to a live process is kept unless --all.
    """
    from grader.backends.cleanup import reclaim_orphans

    try:
        report = reclaim_orphans(temp_dir=temp_dir, include_live=include_live,
                                 daemons=not no_docker)
    except KgraderError as exc:
        fail(exc)
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        click.echo(
            f"removed {len(report.folders_removed)} folder(s), "
            f"{len(report.containers_removed)} container(s), "
            f"{len(report.cgroups_removed)} cgroup(s); kept "
            f"{len(report.folders_kept) + len(report.containers_kept)} in use; "
            f"docker: {report.docker}"
        )
        for err in report.errors:
            click.echo(f"error: {err}", err=True)
    if report.errors:
        sys.exit(1)


def register(cli: click.Group) -> None:
    """Add ``image`` and ``sandbox`` command groups to the main ``kgrader`` group.

    If the main CLI already has a ``sandbox`` group, ``cleanup`` is added to it instead.
    """
    cli.add_command(image_group)
    existing = cli.commands.get("sandbox")
    if isinstance(existing, click.Group):
        existing.add_command(cleanup_cmd)
    else:
        cli.add_command(sandbox_group)


@click.group()
def _standalone() -> None:
    """kgrader docker commands (standalone entry point)."""


register(_standalone)

if __name__ == "__main__":
    _standalone()
