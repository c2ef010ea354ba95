"""What one error code is: the :class:`Code` entry every code of the catalogue
(:mod:`sandbox.contract.codes`) is, and the page ``docs/errors.md`` made of them.

Every fact about a code lives on its entry, so that a new check's code cannot be forgotten
by a consumer that keeps its own list: where it can appear, its stages, who can be blamed
(``origins``), whether it is a timing verdict a shared device can cause (``timing``:
:mod:`grader.report.shared_device`), whether it disqualifies a leaderboard submission
(``disqualifying``: :mod:`grader.leaderboard.integrity`), whether a re-run may help and
the leaderboard and the service retry it (``retried``), and the HTTP status (``http``) or
CLI exit code (``exit_code``) it is answered with. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Stage = Literal["sandbox", "compile", "correctness", "benchmark", "accept", "integrity",
                "scan", "usage", "arguments"]
# usage: the caller's own input (a CLI error document's origin); never in a report.
Blame = Literal["candidate", "infrastructure", "usage"]
Where = Literal["report", "host", "api"]

CURRENT = "current_"  # the same failure caused by the current best, not the candidate
RULE_ID = r"^[a-z][a-z0-9\-]*$"  # a scan-stage code: a rule id (grader.scan.policy.RULE_ID)
EXIT_ERROR = 2  # the CLI's exit code of a host error (grader.cli.common.EXIT_ERROR)


class UnknownCode(ValueError):
    """A code the catalogue does not define, or an origin it does not allow for it."""


@dataclass(frozen=True)
class Code:
    """One code. ``where``: ``report`` (an error in a report, from the judge or the host's
    reading of its record), ``host`` (a failure before or beside grading: the CLI's
    ``error:`` line and JSON error document, an agent tool's result) or ``api`` (a refusal
    of the grading service's HTTP API, ``grader.service``), one or more. ``runner``: a runner's
    own reply may name it (any other code it names becomes ``exception``). ``current``: also
    reported as ``current_<name>`` when the current best, not the candidate, caused it.

    ``timing``: a verdict against a side that rests on a clock or on the device being idle
    (a shared device makes it ``foreign_gpu_process``). ``disqualifying``: a candidate's
    failure with it is a leaderboard integrity violation (its other tasks are not ranked).
    ``retried``: an evaluation (or a host error) with it is re-run by the leaderboard and
    the service, where its origin is ``infrastructure`` (default: whether it can be).
    ``http``: the API's status for it; ``exit_code``: the CLI's, for a host code."""

    name: str
    stages: tuple[Stage, ...]
    origins: tuple[Blame, ...]
    meaning: str
    action: str
    where: tuple[Where, ...] = ("report",)
    runner: bool = False
    current: bool = True
    timing: bool = False
    disqualifying: bool = False
    retried: bool | None = None
    http: int | None = None
    exit_code: int | None = None

    def __post_init__(self) -> None:
        if self.retried is None:
            object.__setattr__(self, "retried", "infrastructure" in self.origins)
        if self.exit_code is None and "host" in self.where:
            object.__setattr__(self, "exit_code", EXIT_ERROR)


def host_code(name: str, origins: tuple[Blame, ...], meaning: str, action: str,
              where: tuple[Where, ...] = ("host",), *, retried: bool | None = None,
              http: int | None = None, exit_code: int | None = None) -> Code:
    """A code of a failure before or beside grading (no stage, never ``current_``)."""
    return Code(name, (), origins, meaning, action, where=where, current=False,
                retried=retried, http=http, exit_code=exit_code)


def api_code(name: str, http: int, meaning: str, action: str) -> Code:
    """A refusal of the grading service's HTTP API with status ``http``: the caller's."""
    return host_code(name, ("usage",), meaning, action, ("api",), http=http)


def page(catalogue: Iterable[Code]) -> str:
    """``docs/errors.md``: the catalogue as a page (``python3 scripts/errors_doc.py``)."""
    entries = list(catalogue)
    out = ["# Error codes", "",
           "<!-- generated from sandbox/contract/codes.py by scripts/errors_doc.py: do not edit -->",
           "", "Every error in a report has a `stage`, a `code` and an `origin` (`candidate`: the "
           "submission's fault, counted against it; `infrastructure`: kgrader's, the machine's or "
           "the task's, never graded). This page lists every code kgrader can return; the "
           "report's JSON Schema (`kgrader schema`) enumerates the same set.", "",
           f"A code marked *current* is also reported as `{CURRENT}<code>` when the current best, "
           "not the candidate, caused it (acceptance runs both). Codes of the `scan` stage are "
           "rule ids: the policy's (`policies/*.toml`) or the scanner's own (`syntax-error`, "
           "`too-complex`, `module-not-allowed` and the other allow-list denials).", "",
           "Facts: *timing* (a verdict resting on a clock or an idle device: when another job "
           "computed on the sandbox's GPU it becomes `foreign_gpu_process`), *disqualifying* "
           "(a leaderboard integrity violation: the submission's other tasks are not ranked), "
           "*retried* (with origin `infrastructure`, the leaderboard and the service re-run "
           "the evaluation), the HTTP status of an API code, the CLI exit code of a host code.",
           ""]
    for where, title, blurb in (
            ("report", "In a report", "The `errors` of a report (`kgrader run --json`)."),
            ("host", "Before or beside grading",
             "Nothing was graded (CLI exit code 2): the CLI's `error:` line and JSON error "
             "document, an agent tool's result. Origin `usage` is the caller's own input; the "
             "agent tools report it as stage `usage`, origin `infrastructure`."),
            ("api", "The grading service's HTTP API",
             "A refused request: an HTTP 4xx/5xx status with `{\"code\", \"message\"}` "
             "(`kgrader serve`).")):
        out += [f"## {title}", "", blurb, "",
                "| code | stage | origin | facts | meaning | what to do |",
                "|---|---|---|---|---|---|"]
        for c in sorted((c for c in entries if where in c.where), key=lambda c: c.name):
            stages = ", ".join(c.stages) or "—"
            name = f"`{c.name}`" + (" (*current*)" if c.current else "")
            out.append(f"| {name} | {stages} | {', '.join(c.origins)} | {_facts(c, where)} | "
                       f"{c.meaning} | {c.action} |")
        out.append("")
    return "\n".join(out)


def _facts(c: Code, where: str) -> str:
    facts = [f for f, on in (("timing", c.timing), ("disqualifying", c.disqualifying),
                             ("retried", c.retried)) if on]
    if where == "api" and c.http is not None:
        facts.append(f"HTTP {c.http}")
    if where == "host" and c.exit_code is not None:
        facts.append(f"exit {c.exit_code}")
    return ", ".join(facts) or "—"
