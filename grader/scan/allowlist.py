"""The allow-list of the kernel-only policies, compiled: what is not listed is denied.

A deny-list can only name what someone thought of; Python is dynamic enough that it loses
somewhere (docs/security-review.md: the scan loses somewhere). A kernel file needs very little, so the
kernel-only policies list that little instead (``[allowlist]`` in ``policies/*.toml``):

* ``module-not-allowed``: an import, or a dotted name, rooted in a module not listed;
* ``name-not-allowed``: a name below a listed module that its ``names`` do not cover, or
  that passes through one of its ``deny_segments`` (``tl.core.builtins``), or a star import;
* ``builtin-not-allowed``: a builtin (or module dunder such as ``__file__``) not listed;
* ``module-as-value``: a listed module used as a value (passed, stored, returned) rather
  than as the base of a dotted name, since a module that leaves the scan's sight carries
  every attribute it re-exports (``torch.os``, ``typing.sys``) with it.

The rule ids belong to this mechanism; the lists are data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import translate

from grader.scan.names import NamePatterns
from grader.scan.policy import AllowedModule, AllowList

MODULE_RULE = "module-not-allowed"
NAME_RULE = "name-not-allowed"
BUILTIN_RULE = "builtin-not-allowed"
VALUE_RULE = "module-as-value"
ATTRIBUTE_RULE = "attribute-not-allowed"  # grader.scan.attributes


@dataclass(frozen=True)
class Denial:
    """Why one name is not allowed: the rule id and a message naming the name and policy."""

    rule: str
    message: str


@dataclass(frozen=True)
class _Module:
    names: NamePatterns
    segments: re.Pattern[str] | None
    why: str


def _segments(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{translate(p)})" for p in patterns))


class AllowIndex:
    """Lookup tables of one policy's allow-list; answers are memoised per dotted name."""

    def __init__(self, policy: str, allow: AllowList) -> None:
        self.policy = policy
        self.modules = {key: _Module(NamePatterns(m.names), _segments(m.deny_segments), m.why)
                        for key, m in allow.modules}
        self.builtins = NamePatterns(allow.builtins)
        self.attributes = (frozenset(allow.attributes) if allow.attributes is not None
                           else None)
        self.kernel_attributes = (frozenset(allow.kernel_attributes)
                                  if allow.kernel_attributes is not None else None)
        self._cache: dict[tuple[str, bool], Denial | None] = {}

    def module_key(self, name: str) -> str | None:
        """The longest listed module that is ``name`` or a dotted prefix of it."""
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            key = ".".join(parts[:end])
            if key in self.modules:
                return key
        return None

    def is_module(self, name: str) -> bool:
        return name in self.modules

    def check(self, name: str, builtin: bool) -> Denial | None:
        """None when ``name`` (resolved, dotted) is allowed; ``builtin``: rooted in builtins."""
        key = (name, builtin)
        if key not in self._cache:
            self._cache[key] = self._builtin(name) if builtin else self._name(name)
        return self._cache[key]

    def importable(self, module: str) -> Denial | None:
        """``from MODULE import ...``: the module must be at or below a listed one."""
        if self.module_key(module) is not None:
            return None
        return self._not_listed(module)

    def _builtin(self, name: str) -> Denial | None:
        if self.builtins.match(name):
            return None
        return Denial(BUILTIN_RULE, f"{name} is not one of the builtins policy {self.policy} "
                                    "allows (a kernel file needs none of the others)")

    def _name(self, name: str) -> Denial | None:
        key = self.module_key(name)
        if key is None:
            return self._not_listed(name)
        if name == key:
            return None
        rest = name[len(key) + 1:]
        if "*" in rest:
            return Denial(NAME_RULE, f"from {key} import * hides which names are used; "
                                     f"policy {self.policy} needs each name imported by name")
        entry = self.modules[key]
        if entry.segments is not None:
            for seg in rest.split("."):
                if entry.segments.match(seg):
                    return Denial(NAME_RULE, f"{name} goes through {seg!r}, which policy "
                                             f"{self.policy} denies below {key}")
        if entry.names.match(rest):
            return None
        return Denial(NAME_RULE, f"{name} is not on policy {self.policy}'s allow-list for "
                                 f"{key} ({entry.why})")

    def _not_listed(self, name: str) -> Denial:
        root = name.split(".")[0] if not name.startswith(".") else name
        listed = ", ".join(sorted(self.modules))
        return Denial(MODULE_RULE, f"module {root or name} is not on policy {self.policy}'s "
                                   f"allow-list (allowed: {listed})")

    def value_denial(self, name: str) -> Denial:
        return Denial(VALUE_RULE, f"the module {name} is used as a value; policy {self.policy} "
                                  "only allows a module as the base of a dotted name or an alias")


def describe(allow: AllowList) -> list[str]:
    """The allow-list as readable lines, for ``kgrader policy show``."""
    lines = ["allow-list (anything not listed is denied):", f"  rationale: {allow.rationale}"]
    lines.extend(_wrapped("builtins", allow.builtins, indent=2))
    lines.append("  modules:")
    for key, entry in allow.modules:
        lines.append(f"    {key}: {entry.why}")
        lines.extend(_wrapped("names", entry.names or ("(the module only)",)))
        if entry.deny_segments:
            lines.extend(_wrapped("never through", entry.deny_segments))
    if allow.attributes is not None:
        lines.extend(_wrapped("attributes on values outside kernels", allow.attributes, indent=2))
        lines.append("    (and names the file defines itself, unless tensors or frames have them)")
    if allow.kernel_attributes is not None:
        lines.extend(_wrapped("attributes on values inside kernels", allow.kernel_attributes,
                              indent=2))
    lines.append(f"  findings: {MODULE_RULE}, {NAME_RULE}, {BUILTIN_RULE}, {VALUE_RULE}, "
                 f"{ATTRIBUTE_RULE}")
    return lines


def _wrapped(label: str, items: tuple[str, ...], width: int = 96, indent: int = 6) -> list[str]:
    out, line = [], f"{' ' * indent}{label}: "
    pad = " " * len(line)
    for i, item in enumerate(items):
        piece = item + (", " if i < len(items) - 1 else "")
        if len(line) + len(piece) > width and line.strip() != f"{label}:":
            out.append(line.rstrip())
            line = pad
        line += piece
    out.append(line.rstrip())
    return out


__all__ = ["AllowIndex", "AllowList", "AllowedModule", "Denial", "describe"]
