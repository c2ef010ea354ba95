"""CLI for the static scan: ``kgrader scan`` and ``kgrader policy list|show|test``.

Thin: parses arguments, calls :mod:`grader.scan`, prints. Exit codes: 0 nothing denied
(or every corpus case as expected), 1 something denied (or a corpus mismatch), 2 the
caller's input cannot be used (missing file, bad policy) with a one-line ``error:``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from grader.cli.common import kgrader_errors
from grader.report.render import plain
from grader.scan import ScanResult, list_policies, load_policy, read_candidate, scan_source
from grader.scan.allowlist import describe
from grader.scan.corpus import run_corpus
from grader.scan.policy import Rule, effective_severity

F = TypeVar("F", bound=Callable[..., Any])


def _console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def _print_result(console: Console, path: str, result: ScanResult) -> None:
    # A snippet is the candidate's source line: escapes in it must not reach the terminal.
    path = plain(path)
    verdict = Text("DENIED", style="bold red") if result.denied else Text("allowed", style="green")
    console.print(Text.assemble(Text(path, style="bold"), f"  [{result.policy}]  ", verdict))
    for f in result.findings:
        style = "red" if f.severity == "deny" else "yellow"
        console.print(Text.assemble(
            f"  {path}:{f.line}:{f.col}: ", Text(f"{f.severity} {f.rule}", style=style),
            plain(f": {f.message}")))
        if f.snippet:
            console.print(Text(plain(f"      {f.snippet}"), style="dim"))


@click.command("scan")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True))
@click.option("--policy", "policy_name", default="default", show_default=True,
              help="Policy name (see `kgrader policy list`) or path to a .toml file.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@kgrader_errors
def scan_cmd(files: tuple[str, ...], policy_name: str, as_json: bool) -> None:
    """Statically scan candidate FILES; exit 1 when any is denied."""
    policy = load_policy(policy_name)
    sources = {path: read_candidate(path) for path in files}  # all usage errors first
    results = {path: scan_source(src, policy, filename=path) for path, src in sources.items()}
    if as_json:
        doc = {"policy": policy.name,
               "denied": any(r.denied for r in results.values()),
               "files": [{"file": p, **r.summary().model_dump(mode="json")}
                         for p, r in results.items()]}
        click.echo(json.dumps(doc, indent=2))
    else:
        console = _console()
        for path, result in results.items():
            _print_result(console, path, result)
    sys.exit(1 if any(r.denied for r in results.values()) else 0)


@click.group("policy")
def policy_group() -> None:
    """List, show and test deny policies (policies/*.toml)."""


@policy_group.command("list")
@kgrader_errors
def policy_list() -> None:
    """Names of the shipped policies."""
    console = _console()
    for name in list_policies():
        policy = load_policy(name)
        console.print(Text.assemble(Text(name, style="bold"), f"  {policy.description}"))


@policy_group.command("show")
@click.argument("name")
@kgrader_errors
def policy_show(name: str) -> None:
    """Every rule of NAME after `extends` is resolved: severity, message, rationale."""
    policy = load_policy(name)
    console = _console()
    console.print(Text.assemble(Text(policy.name, style="bold"), f"  ({policy.path})"))
    console.print(f"extends: {' -> '.join(policy.chain)}")
    console.print(f"promote_warnings: {str(policy.promote_warnings).lower()}")
    console.print(policy.description)
    counts = {"deny": 0, "warn": 0}
    for rule in policy.rules:
        sev = effective_severity(policy, rule)
        counts[sev] += 1
        label = sev if sev == rule.severity else f"{sev} (promoted from {rule.severity})"
        console.print()
        console.print(Text.assemble(Text(rule.id, style="bold"), "  ",
                                    Text(label, style="red" if sev == "deny" else "yellow")))
        console.print(f"  message:   {rule.message}")
        console.print(f"  rationale: {rule.rationale}")
        console.print(f"  threat:    {rule.threat}")
        console.print(Text(f"  matches:   {_matchers(rule)}", style="dim"))
    console.print()
    if policy.allowlist is not None:
        console.print("\n".join(describe(policy.allowlist)), markup=False)
        console.print()
    console.print(f"{len(policy.rules)} rules: {counts['deny']} deny, {counts['warn']} warn")


def _matchers(rule: Rule) -> str:
    parts = []
    for key in ("refs", "allow", "writes", "write_attrs", "attributes", "methods", "operators",
                "native", "calls"):
        values = getattr(rule, key)
        if values:
            shown = ", ".join(values[:6]) + (f", ... (+{len(values) - 6})" if len(values) > 6 else "")
            parts.append(f"{key}=[{shown}]")
    if rule.check:
        parts.insert(0, f"check={rule.check}")
    return "; ".join(parts)


@policy_group.command("test")
@click.argument("name")
@click.argument("directory", type=click.Path(file_okay=False))
@kgrader_errors
def policy_test(name: str, directory: str) -> None:
    """Scan every *.py in DIRECTORY; its first line says `# expect: deny RULE` or `allow`."""
    policy = load_policy(name)
    cases = run_corpus(policy, Path(directory))
    table = Table(title=f"policy {policy.name} on {directory}")
    for col in ("file", "expected", "got", "rule", ""):
        table.add_column(col, overflow="fold")
    for case in cases:
        mark = Text("ok", style="green") if case.ok else Text("MISMATCH", style="bold red")
        rules = ", ".join(case.rules) + (f" ({case.note})" if case.note else "")
        table.add_row(case.file, case.expected, case.got, rules, mark)
    console = _console()
    console.print(table)
    bad = sum(not c.ok for c in cases)
    console.print(f"{len(cases)} files, {bad} mismatches")
    sys.exit(1 if bad or not cases else 0)


def register(cli: click.Group) -> None:
    """Add `scan` and `policy` to the kgrader command group."""
    cli.add_command(scan_cmd)
    cli.add_command(policy_group)
