"""Policy regression corpus: each file's first line says what the policy must decide.

``# expect: deny RULE_ID`` means the file is denied and RULE_ID is among the denials;
``# expect: allow`` means nothing is denied. A file without the header is a mismatch,
so a corpus cannot silently grow unchecked files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from grader.errors import CandidateFileError
from grader.scan import Policy, read_candidate, scan_source

_HEADER = re.compile(r"^#\s*expect:\s*(?:(allow)|deny\s+([a-z][a-z0-9\-]*))\s*$")


@dataclass(frozen=True)
class CaseResult:
    """One corpus file: what was expected, what the scan decided, whether they agree."""

    file: str
    expected: str
    got: str
    rules: tuple[str, ...]
    ok: bool
    note: str = ""


def parse_expectation(first_line: str) -> tuple[str, str | None] | None:
    """('allow', None) or ('deny', rule id); None when the header is missing or malformed."""
    m = _HEADER.match(first_line.strip())
    if m is None:
        return None
    return ("allow", None) if m.group(1) else ("deny", m.group(2))


def check_file(path: Path, policy: Policy) -> CaseResult:
    try:
        source = read_candidate(path)
    except CandidateFileError as e:
        return CaseResult(path.name, "?", "error", (), False, e.message)
    expectation = parse_expectation(source.split("\n", 1)[0])
    result = scan_source(source, policy, filename=str(path))
    denied = tuple(dict.fromkeys(f.rule for f in result.findings if f.severity == "deny"))
    got = "deny" if result.denied else "allow"
    if expectation is None:
        return CaseResult(path.name, "(no header)", got, denied, False,
                          "first line must be '# expect: allow' or '# expect: deny RULE_ID'")
    kind, rule = expectation
    expected = kind if rule is None else f"{kind} {rule}"
    ok = (not result.denied) if kind == "allow" else (rule in denied)
    note = ""
    if not ok and kind == "deny" and result.denied:
        note = f"denied, but not by {rule}"
    return CaseResult(path.name, expected, got, denied, ok, note)


def run_corpus(policy: Policy, directory: str | Path) -> list[CaseResult]:
    """Check every ``*.py`` directly in ``directory`` (not recursive), sorted by name."""
    folder = Path(directory)
    if not folder.is_dir():
        raise CandidateFileError(f"not a directory: {folder}")
    return [check_file(p, policy) for p in sorted(folder.glob("*.py"))]
