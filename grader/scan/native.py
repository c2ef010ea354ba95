"""Native (C++/CUDA/PTX) source scanner for inline extensions and raw kernels.

Input is the string literals the Python scanner found in the source arguments of a call
the policy lists under ``native_sources`` (``load_inline``, ``cupy.RawKernel`` ...). The
text is normalised the way the C preprocessor would see it first — line splices joined,
comments blanked, string literals kept — so neither ``sys\\<newline>tem(`` nor a ``//``
inside a string literal can hide a call. Then each ``native`` regex of the policy runs
over it, and the ``asm-allowlist`` check reads every ``asm(...)`` template.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from grader.scan.matchers import Compiled, Hit

_TOKENS = re.compile(r"""//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""", re.S)
_ASM = re.compile(r"\b(?:asm|__asm__|__asm)\b\s*(?:volatile\b|__volatile__\b)?\s*(?:goto\b)?\s*\(")
_STRING = re.compile(r'\s*"((?:\\.|[^"\\\n])*)"')
_LABEL = re.compile(r"^[A-Za-z_$][\w$]*:\s*")
_PREDICATE = re.compile(r"^@!?%?\w+\s+")


def splice(text: str) -> str:
    """Join backslash-newline continuations, keeping the line count (blank lines after)."""
    if "\\\n" not in text:
        return text
    out: list[str] = []
    pending, blanks = "", 0
    for line in text.split("\n"):
        if line.endswith("\\"):
            pending += line[:-1]
            blanks += 1
            continue
        out.append(pending + line)
        out.extend([""] * blanks)
        pending, blanks = "", 0
    if pending:
        out.append(pending)
        out.extend([""] * (blanks - 1))
    return "\n".join(out)


def strip_comments(text: str) -> str:
    """Blank C/C++ comments (keeping newlines); leave string and char literals alone."""

    def repl(m: re.Match[str]) -> str:
        tok = m.group(0)
        return tok if tok[0] in "\"'" else " " + "\n" * tok.count("\n")

    return _TOKENS.sub(repl, text)


def asm_templates(text: str) -> Iterator[tuple[int, str | None]]:
    """(offset, template) for each asm statement; template None when it is not a literal."""
    for m in _ASM.finditer(text):
        pos, parts = m.end(), []
        while (s := _STRING.match(text, pos)) is not None:
            parts.append(s.group(1))
            pos = s.end()
        yield m.start(), ("".join(parts) if parts else None)


def mnemonics(template: str) -> Iterator[str]:
    """Instruction mnemonics of a PTX (or other) asm template, directives included."""
    body = template.replace("\\n", "\n").replace("\\t", " ").replace("{", "\n").replace("}", "\n")
    for stmt in re.split(r"[;\n]", body):
        stmt = _PREDICATE.sub("", _LABEL.sub("", stmt.strip()))
        if stmt:
            yield stmt.split()[0]


def _asm_violation(template: str | None, allowed: frozenset[str]) -> str | None:
    if template is None:
        return "asm template is not a string literal"
    for mnemonic in mnemonics(template):
        base = mnemonic if mnemonic.startswith(".") else mnemonic.split(".")[0]
        if base not in allowed:
            return f"asm instruction {mnemonic!r} is not in the allow-list"
    return None


def scan_text(text: str, compiled: Compiled) -> Iterator[tuple[Hit, int, str | None]]:
    """(hit, offset, message) for one native source text; offsets index ``text``."""
    clean = strip_comments(splice(text))
    for hit, pattern in compiled.native:
        for m in pattern.finditer(clean):
            yield hit, m.start(), None
    entry = compiled.checks.get("asm-allowlist")
    if entry is not None:
        hit, rule = entry
        allowed = frozenset(rule.allow)
        for offset, template in asm_templates(clean):
            problem = _asm_violation(template, allowed)
            if problem is not None:
                yield hit, offset, f"{hit.message} ({problem})"


def scan(pieces: list[tuple[str, int]], compiled: Compiled) -> list[tuple[Hit, int, str | None]]:
    """Scan string literals (text, first line in the Python file); lines are file lines."""
    out = []
    for text, first_line in pieces:
        # splice() and strip_comments() keep the line count, so offsets map back directly
        clean_lines = strip_comments(splice(text))
        for hit, offset, message in scan_text(text, compiled):
            out.append((hit, first_line + clean_lines.count("\n", 0, offset), message))
    return out
