"""A policy compiled into lookup tables, so that the walker does one dict probe per name.

Compiled once per policy object and cached; answers are memoised per dotted name, since
a file repeats the same few names (``tl.load``, ``torch.empty``) many times.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from grader.scan.allowlist import AllowIndex
from grader.scan.names import NamePatterns
from grader.scan.policy import CheckId, Policy, Rule, Severity, effective_severity

__all__ = ["Compiled", "Hit", "NamePatterns", "compile_policy"]


@dataclass(frozen=True)
class Hit:
    """What the walker needs to build a finding."""

    rule: str
    severity: Severity
    message: str


@dataclass
class _NameRule:
    hit: Hit
    refs: NamePatterns
    allow: NamePatterns


@dataclass
class Compiled:
    """Index of one policy's rules by matcher kind."""

    policy: Policy
    ref_rules: list[_NameRule] = field(default_factory=list)
    write_rules: list[tuple[Hit, NamePatterns]] = field(default_factory=list)
    write_attrs: dict[str, list[Hit]] = field(default_factory=dict)
    attributes: dict[str, list[Hit]] = field(default_factory=dict)
    attribute_globs: list[tuple[Hit, NamePatterns]] = field(default_factory=list)
    attribute_allow: dict[str, NamePatterns] = field(default_factory=dict)  # by rule id
    methods: dict[str, list[Hit]] = field(default_factory=dict)
    methods_anywhere: dict[str, list[Hit]] = field(default_factory=dict)
    operators: dict[str, list[Hit]] = field(default_factory=dict)
    checks: dict[CheckId, tuple[Hit, Rule]] = field(default_factory=dict)
    native: list[tuple[Hit, re.Pattern[str]]] = field(default_factory=list)
    native_calls: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = field(default_factory=dict)
    # callable-as-value, plain-allocator: names only ever called directly -> the rule's hit
    as_value: dict[str, Hit] = field(default_factory=dict)
    # attribute name -> ids of the rules that do not match it in a kernel's descriptor call
    kernel_calls: dict[str, frozenset[str]] = field(default_factory=dict)
    allow: AllowIndex | None = None
    _attr_cache: dict[str, tuple[Hit, ...]] = field(default_factory=dict)
    _ref_cache: dict[str, tuple[Hit, ...]] = field(default_factory=dict)
    _write_cache: dict[str, tuple[Hit, ...]] = field(default_factory=dict)

    def refs(self, name: str) -> tuple[Hit, ...]:
        """Rules whose ``refs`` match this dotted name (and whose ``allow`` does not)."""
        cached = self._ref_cache.get(name)
        if cached is None:
            cached = tuple(r.hit for r in self.ref_rules
                           if r.refs.match(name) and not r.allow.match(name))
            self._ref_cache[name] = cached
        return cached

    def attrs(self, name: str) -> tuple[Hit, ...]:
        """Rules whose ``attributes`` (exact or glob) match this attribute name."""
        cached = self._attr_cache.get(name)
        if cached is None:
            cached = tuple(self.attributes.get(name, ())) + tuple(
                h for h, pats in self.attribute_globs if pats.match(name))
            self._attr_cache[name] = cached
        return cached

    def attrs_except(self, hits: tuple[Hit, ...],
                     dotted: Callable[[], str | None]) -> tuple[Hit, ...]:
        """``hits`` less those whose rule's ``allow`` matches the resolved dotted name
        (``tl.load`` is Triton's, ``x.load`` anything's); ``dotted`` is asked only if needed."""
        if not any(h.rule in self.attribute_allow for h in hits):
            return hits
        name = dotted()
        if name is None:
            return hits
        return tuple(h for h in hits if h.rule not in self.attribute_allow
                     or not self.attribute_allow[h.rule].match(name))

    def writes(self, name: str) -> tuple[Hit, ...]:
        cached = self._write_cache.get(name)
        if cached is None:
            cached = tuple(h for h, pats in self.write_rules if pats.match(name))
            self._write_cache[name] = cached
        return cached


def _add(table: dict[str, list[Hit]], keys: tuple[str, ...], hit: Hit) -> None:
    for key in keys:
        table.setdefault(key, []).append(hit)


@lru_cache(maxsize=32)
def compile_policy(policy: Policy) -> Compiled:
    """Build (once per policy object) the tables the scanners probe."""
    out = Compiled(policy)
    for rule in policy.rules:
        hit = Hit(rule.id, effective_severity(policy, rule), rule.message)
        if rule.refs:
            out.ref_rules.append(_NameRule(hit, NamePatterns(rule.refs), NamePatterns(rule.allow)))
        if rule.writes:
            out.write_rules.append((hit, NamePatterns(rule.writes)))
        _add(out.write_attrs, rule.write_attrs, hit)
        _add(out.attributes, tuple(a for a in rule.attributes if "*" not in a), hit)
        globs = tuple(a for a in rule.attributes if "*" in a)
        if rule.attributes and rule.allow:
            out.attribute_allow[rule.id] = NamePatterns(rule.allow)
        if globs:
            out.attribute_globs.append((hit, NamePatterns(globs)))
        _add(out.methods if rule.outside_kernels else out.methods_anywhere, rule.methods, hit)
        _add(out.operators, rule.operators, hit)
        for pattern in rule.native:
            out.native.append((hit, re.compile(pattern, re.MULTILINE)))
        if rule.check is not None:
            out.checks[rule.check] = (hit, rule)
        if rule.check in ("callable-as-value", "plain-allocator"):
            out.as_value.update(dict.fromkeys(rule.calls, hit))
        for name in rule.kernel_calls:
            out.kernel_calls[name] = out.kernel_calls.get(name, frozenset()) | {rule.id}
    for src in policy.native_sources:
        out.native_calls[src.call] = (src.positions, src.keywords)
    if policy.allowlist is not None:
        out.allow = AllowIndex(policy.name, policy.allowlist)
    return out
