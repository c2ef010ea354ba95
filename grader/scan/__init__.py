"""Static scan: may this candidate run at all, and if not, which rule and which line.

Nothing here imports or executes the candidate: the source is parsed with :mod:`ast` and
walked once (iteratively, so a deeply nested file cannot overflow the walker). Policies
are data (``policies/*.toml``, see :mod:`grader.scan.policy`).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path

from grader.astparse import parse_module
from grader.errors import CandidateFileError, CandidateTooLargeError, UsageError
from grader.report.model import Finding, ScanSummary
from grader.scan.matchers import compile_policy
from grader.scan.policy import (
    ALLOWLIST_RULE_IDS,
    Policy,
    Rule,
    list_policies,
    load_policy,
    policies_dir,
)
from grader.scan.python_ast import Walker

__all__ = [
    "Policy",
    "Rule",
    "ScanResult",
    "list_policies",
    "load_policy",
    "policies_dir",
    "read_candidate",
    "scan_file",
    "scan_source",
]

MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class ScanResult:
    """Findings of one file under one policy; ``denied`` when any finding is a denial."""

    policy: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def denied(self) -> bool:
        return any(f.severity == "deny" for f in self.findings)

    def summary(self) -> ScanSummary:
        return ScanSummary(policy=self.policy, denied=self.denied, findings=list(self.findings))


def _fatal(rule: str, message: str, filename: str, line: int | None, col: int | None,
           source: str) -> Finding:
    lines = source.splitlines()
    snippet = lines[line - 1].strip()[:200] if line and 0 < line <= len(lines) else ""
    return Finding(rule=rule, severity="deny", message=message, line=line, col=col,
                   snippet=snippet, file=filename)


def scan_source(source: str, policy: Policy, filename: str = "<candidate>") -> ScanResult:
    """Scan Python source text; never raises for bad candidate code (it becomes a finding)."""
    # The cyclic GC would repeatedly traverse the hundreds of thousands of (acyclic) AST
    # nodes of a large file while they are created; pausing it halves the parse time.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        findings = _scan(source, policy, filename)
    finally:
        if gc_was_enabled:
            gc.enable()
    findings.sort(key=lambda f: (f.line or 0, f.col or 0, f.rule))
    return ScanResult(policy.name, [f.model_copy(update={"threat": threat_of(policy, f.rule)})
                                    for f in findings])


# The threat family of the findings no policy rule names (the policy's own rules carry theirs).
_OWN_THREATS = {
    **dict.fromkeys(ALLOWLIST_RULE_IDS, "anything a kernel does not need: the allow-list "
                                        "denies what it does not list"),
    "syntax-error": "unscannable source: what does not parse cannot be checked",
    "too-complex": "unscannable source: what cannot be analysed cannot be checked",
}


def threat_of(policy: Policy, rule_id: str) -> str:
    """The one-line threat family a finding of ``rule_id`` belongs to under ``policy``."""
    rule = policy.rule(rule_id)
    if rule is not None:
        return rule.threat
    return _OWN_THREATS.get(rule_id, "a check of the scanner itself")


def _scan(source: str, policy: Policy, filename: str) -> list[Finding]:
    try:
        tree = parse_module(source, filename=filename)
    except SyntaxError as e:
        msg = f"the file does not parse: {e.msg}"
        return [_fatal("syntax-error", msg, filename, e.lineno, e.offset, source)]
    except ValueError as e:  # e.g. NUL bytes in a str handed in directly
        return [_fatal("syntax-error", f"the file does not parse: {e}", filename, 1, 0, source)]
    except (RecursionError, MemoryError):
        msg = "the file is nested too deeply to parse"
        return [_fatal("too-complex", msg, filename, 1, 0, source)]
    try:
        return Walker(source, compile_policy(policy), filename).run(tree)
    except RecursionError:  # deep Call/Attribute chains in name resolution
        return [_fatal("too-complex", "the file is nested too deeply to analyse", filename, 1, 0,
                       source)]


def read_candidate(path: str | Path, max_bytes: int = MAX_BYTES, what: str = "candidate") -> str:
    """Read a candidate as UTF-8 text, refusing what cannot be a Python source file.
    ``what`` names the file in the messages (``current`` for the current best: its
    failure is then the caller's, :class:`UsageError` code ``bad_current_file``)."""
    p = Path(path)
    if not p.exists():
        raise _file_error(what, f"{what} not found: {p}")
    if p.is_dir():
        raise _file_error(what, f"{what} is a directory: {p}")
    try:
        with p.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as e:
        raise _file_error(what, f"cannot read {what} {p}: {e.strerror or e}") from e
    if len(data) > max_bytes:
        raise _file_error(what, f"{what} is larger than {max_bytes} bytes: {p}", large=True)
    if b"\x00" in data:
        raise _file_error(what, f"{what} is binary (contains NUL bytes): {p}")
    try:
        text = data.decode("utf-8-sig")  # a BOM is legal in Python source
    except UnicodeDecodeError as e:
        raise _file_error(what, f"{what} is not UTF-8 (byte {e.start}): {p}") from e
    return check_source(text, str(p), max_bytes, what)


def _file_error(what: str, message: str, large: bool = False) -> UsageError:
    if what != "current":
        return CandidateTooLargeError(message) if large else CandidateFileError(message)
    return UsageError(message, code="bad_current_file")


def check_source(text: str, name: str = "<source>", max_bytes: int = MAX_BYTES,
                 what: str = "candidate") -> str:
    """The checks a candidate's text must pass however it arrived (file, tool, leaderboard,
    the service's API)."""
    if not isinstance(text, str):
        raise _file_error(what, f"source must be a string, got {type(text).__name__}: {name}")
    if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise _file_error(what, f"{what} is larger than {max_bytes} bytes: {name}", large=True)
    if not text.strip():
        raise _file_error(what, f"{what} is empty: {name}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate: no UTF-8 file holds it
        raise _file_error(what, f"{what} is not UTF-8 (a lone surrogate at character "
                                f"{e.start}): {name}") from None
    if "\x00" in text:
        raise _file_error(what, f"{what} is binary (contains NUL bytes): {name}")
    return text


def scan_file(path: str | Path, policy: Policy) -> ScanResult:
    """:func:`read_candidate` then :func:`scan_source`, findings labelled with the path."""
    return scan_source(read_candidate(path), policy, filename=str(path))
