"""CLI for the static scan: ``kgrader scan`` and ``kgrader policy list|show|test|diff``.

Thin: parses arguments, calls :mod:`grader.scan`, prints (or ``--json``: one document).
Exit codes: 0 nothing denied (or every corpus case as expected), 1 something denied (or a
corpus mismatch), 2 the caller's input cannot be used (a candidate file that cannot be
read, a bad policy or task) with a one-line ``error:``.
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
from grader.report.text import plain
from grader.scan import ScanResult, list_policies, load_policy, read_candidate, scan_source
from grader.scan.allowlist import describe
from grader.scan.corpus import CaseResult, run_corpus
from grader.scan.policy import Policy, Rule, effective_severity

F = TypeVar("F", bound=Callable[..., Any])


def _console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def _table_console() -> Console:
    # Piped output has no width: rich's 80-column default would fold every table.
    return Console(highlight=False) if sys.stdout.isatty() else Console(highlight=False, width=200)


def _dump(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, ensure_ascii=False))


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
        if f.threat:
            console.print(Text(plain(f"      threat: {f.threat}"), style="dim"))
        if f.snippet:
            console.print(Text(plain(f"      {f.snippet}"), style="dim"))


@click.command("scan")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=True))
@click.option("--policy", "policy_name", default=None,
              help="Policy name (see `kgrader policy list`) or path to a .toml file "
                   "(default: --task's policy, else `default`).")
@click.option("--task", "task_dir", type=click.Path(path_type=Path),
              help="Scan as this task's runs do: with the policy its task.json names.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@kgrader_errors
def scan_cmd(files: tuple[str, ...], policy_name: str | None, task_dir: Path | None,
             as_json: bool) -> None:
    """Statically scan candidate FILES; exit 1 when any is denied.

    The first line says which policy it used and why; with --task and a --policy other
    than the task's own, a warning says the task's runs scan with the task's policy.
    """
    source = "--policy" if policy_name else "default"
    task_policy: Policy | None = None
    if task_dir is not None:
        from grader.task import load_task

        spec = load_task(task_dir)[0]
        task_policy = load_policy(spec.policy)
        if policy_name is None:
            policy_name, source = spec.policy, f"task {task_dir}"
    policy = load_policy(policy_name or "default")
    warnings = []
    if task_policy is not None and task_policy.path != policy.path:
        warnings.append(f"scanning with policy {policy.name!r}, but task {spec.name}'s own "
                        f"policy is {task_policy.name!r}: its runs scan with "
                        f"{task_policy.name!r} (kgrader policy diff {policy.name} "
                        f"{task_policy.name} shows the difference)")
    sources = {path: read_candidate(path) for path in files}  # all usage errors first
    results = {path: scan_source(src, policy, filename=path) for path, src in sources.items()}
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    if as_json:
        _dump({"policy": policy.name, "policy_from": source, "policy_path": policy.path,
               "task_policy": task_policy.name if task_policy is not None else None,
               "warnings": warnings, "denied": any(r.denied for r in results.values()),
               "files": [{"file": p, **r.summary().model_dump(mode="json")}
                         for p, r in results.items()]})
    else:
        console = _console()
        why = {"--policy": "named by --policy", "default": "the default, as neither --policy "
               "nor --task was given; --task DIR scans as that task's runs do"}
        console.print(Text(plain(f"policy {policy.name} ({why.get(source, source)}; "
                                 f"{policy.path})"), style="dim"))
        for path, result in results.items():
            _print_result(console, path, result)
    sys.exit(1 if any(r.denied for r in results.values()) else 0)


@click.group("policy")
def policy_group() -> None:
    """List, show and test deny policies (policies/*.toml)."""


@policy_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@kgrader_errors
def policy_list(as_json: bool) -> None:
    """Names of the shipped policies."""
    policies = [load_policy(name) for name in list_policies()]
    if as_json:
        _dump({"policies": [{"name": p.name, "description": p.description, "path": p.path,
                             "chain": list(p.chain), "allowlist": p.allowlist is not None,
                             "rules": len(p.rules)} for p in policies]})
        return
    console = _console()
    for policy in policies:
        console.print(Text.assemble(Text(policy.name, style="bold"), f"  {policy.description}"))


@policy_group.command("show")
@click.argument("name")
@click.option("--full", is_flag=True, help="Every matcher of every rule (no list is cut short).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the resolved policy as one JSON document (always in full).")
@kgrader_errors
def policy_show(name: str, full: bool, as_json: bool) -> None:
    """Every rule of NAME after `extends` is resolved: severity, message, rationale."""
    policy = load_policy(name)
    if as_json:
        doc = policy.model_dump(mode="json")
        for rule in doc["rules"]:
            rule["effective_severity"] = effective_severity(policy, Rule.model_validate(rule))
        _dump(doc)
        return
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
        console.print(Text(f"  matches:   {_matchers(rule, full)}", style="dim"))
    console.print()
    if policy.allowlist is not None:
        console.print("\n".join(describe(policy.allowlist)), markup=False)
        console.print()
    console.print(f"{len(policy.rules)} rules: {counts['deny']} deny, {counts['warn']} warn"
                  + ("" if full else "; --full shows every matcher, --json everything"))


@policy_group.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@kgrader_errors
def policy_diff(a: str, b: str, as_json: bool) -> None:
    """The rules that differ from policy A to policy B (names or .toml paths, after
    `extends` is resolved): added, removed, severity changed (warn -> deny), parameters
    changed; then promote_warnings, native sources and the allow-list. Exit 0 either way."""
    from grader.scan.policy_diff import diff_policies

    d = diff_policies(load_policy(a), load_policy(b))
    if as_json:
        _dump(d.as_json())
        return
    console = _console()
    console.print(Text.assemble(Text(f"policy diff {d.a.name} -> {d.b.name}", style="bold"),
                                f"  ({d.a.path} -> {d.b.path})"))
    for r in d.rules:
        if r.status == "changed":
            what = [f"{r.severity[0]} -> {r.severity[1]}"] if r.severity_changed else []
            what += [f"{k} changed" for k in r.parameters]
            label, style = "changed", ("red" if r.severity[1] == "deny" and r.severity_changed
                                       else "yellow")
        else:
            what = [str(r.severity[1] if r.status == "added" else r.severity[0])]
            label, style = r.status, "green" if r.status == "added" else "red"
        console.print(Text.assemble(Text(f"  {label:<8}", style=style), Text(r.rule, style="bold"),
                                    f": {'; '.join(what)}"))
        console.print(Text(plain(f"            threat: {r.threat}"), style="dim"))
    for k, (x, y) in d.settings.items():
        shown = (str(x).lower(), str(y).lower()) if isinstance(x, bool) else (len(x), len(y))
        console.print(f"  setting   {k}: {shown[0]} -> {shown[1]}")
    for part, sides in d.allowlist.items():
        for side, sign in (("only_a", "-"), ("only_b", "+")):
            if sides[side]:
                console.print(plain(f"  allow-list {part}: {sign} {', '.join(sides[side])}"))
    n = d.counts()
    console.print("identical" if d.identical else
                  f"{len(d.rules)} rules differ: {n['added']} added, {n['removed']} removed, "
                  f"{n['severity_changed']} severity changed, {n['parameters_changed']} with "
                  f"parameters changed")


def _matchers(rule: Rule, full: bool = False) -> str:
    parts = []
    for key in ("refs", "allow", "writes", "write_attrs", "attributes", "methods", "operators",
                "native", "calls", "kernel_calls"):
        values = getattr(rule, key)
        if values:
            cut = not full and len(values) > 6
            shown = ", ".join(values if not cut else values[:6])
            parts.append(f"{key}=[{shown}{f', ... (+{len(values) - 6})' if cut else ''}]")
    if rule.check:
        parts.insert(0, f"check={rule.check}")
    return "; ".join(parts)


# What a corpus case's outcome means, worst first: a threat the policy now lets through
# is not the same news as a file still denied, by another rule than it names.
CASE_CLASSES = ("let through", "newly denied", "denied by another rule", "unreadable",
                "no header", "as expected")


def case_class(case: CaseResult) -> str:
    """The class of one corpus case (:data:`CASE_CLASSES`)."""
    if case.got == "error":
        return "unreadable"
    if case.expected == "(no header)":
        return "no header"
    if case.ok:
        return "as expected"
    if case.expected.startswith("deny"):
        return "let through" if case.got == "allow" else "denied by another rule"
    return "newly denied"


@policy_group.command("test")
@click.argument("name")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@kgrader_errors
def policy_test(name: str, directory: str, as_json: bool) -> None:
    """Scan every *.py in DIRECTORY; its first line says `# expect: deny RULE` or `allow`.

    Each file is classed: as expected; let through (expected a denial, now allowed);
    denied by another rule (still denied, not by the rule it names); newly denied
    (expected allowed); unreadable; no header. Exit 1 unless every file is as expected.
    """
    policy = load_policy(name)
    cases = run_corpus(policy, Path(directory))
    classes = [case_class(c) for c in cases]
    counts = {k: classes.count(k) for k in CASE_CLASSES if k in classes}
    bad = sum(k != "as expected" for k in classes)
    if as_json:
        _dump({"policy": policy.name, "directory": directory, "files": len(cases),
               "mismatches": bad, "classes": counts,
               "cases": [{"file": c.file, "expected": c.expected, "got": c.got,
                          "rules": list(c.rules), "class": k, "ok": c.ok, "note": c.note}
                         for c, k in zip(cases, classes, strict=True)]})
        sys.exit(1 if bad or not cases else 0)
    table = Table(title=f"policy {policy.name} on {directory}")
    for col in ("file", "expected", "got", "rule", "class", ""):
        table.add_column(col, overflow="fold")
    for case, klass in zip(cases, classes, strict=True):
        ok = klass == "as expected"
        mark = Text("ok", style="green") if ok else Text("MISMATCH", style="bold red")
        rules = ", ".join(case.rules) + (f" ({case.note})" if case.note else "")
        table.add_row(Text(plain(case.file)), case.expected, case.got, Text(plain(rules)),
                      Text(klass, style="green" if ok else "red"), mark)
    console = _table_console()
    console.print(table)
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    console.print(f"{len(cases)} files, {bad} mismatches ({summary or 'none'})")
    sys.exit(1 if bad or not cases else 0)


def register(cli: click.Group) -> None:
    """Add `scan` and `policy` to the kgrader command group."""
    cli.add_command(scan_cmd)
    cli.add_command(policy_group)
