"""What differs between two resolved policies: ``kgrader policy diff A B``.

Rules are matched by id after ``extends`` is resolved. A rule is *added* (only in B),
*removed* (only in A) or *changed*: its effective severity (``promote_warnings``
included: ``warn -> deny``), or its parameters (message, matchers, check, ...), or both.
Besides the rules: ``promote_warnings``, the native-source calls, and the allow-list
(builtins, modules, attribute names; present in one policy only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grader.scan.policy import AllowList, Policy, Rule, effective_severity

# Rule fields compared as parameters (id is the key; severity is compared as effective).
_PARAMS = tuple(k for k in Rule.model_fields if k not in ("id", "severity"))


@dataclass(frozen=True)
class RuleDiff:
    """One rule that differs. ``severity``: (A's, B's) effective severity, None where absent."""

    rule: str
    status: str  # added | removed | changed
    severity: tuple[str | None, str | None]
    threat: str
    parameters: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def severity_changed(self) -> bool:
        return self.status == "changed" and self.severity[0] != self.severity[1]

    def as_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "status": self.status,
                "severity": {"a": self.severity[0], "b": self.severity[1]},
                "severity_changed": self.severity_changed, "threat": self.threat,
                "parameters": {k: {"a": _plain(a), "b": _plain(b)}
                               for k, (a, b) in self.parameters.items()}}


@dataclass(frozen=True)
class PolicyDiff:
    a: Policy
    b: Policy
    rules: list[RuleDiff]
    settings: dict[str, tuple[Any, Any]]  # promote_warnings, native_sources
    allowlist: dict[str, dict[str, list[str]]]  # part -> {"only_a": [...], "only_b": [...]}

    @property
    def identical(self) -> bool:
        return not (self.rules or self.settings or self.allowlist)

    def counts(self) -> dict[str, int]:
        return {"added": sum(r.status == "added" for r in self.rules),
                "removed": sum(r.status == "removed" for r in self.rules),
                "severity_changed": sum(r.severity_changed for r in self.rules),
                "parameters_changed": sum(bool(r.parameters) for r in self.rules)}

    def as_json(self) -> dict[str, Any]:
        return {"a": {"name": self.a.name, "path": self.a.path},
                "b": {"name": self.b.name, "path": self.b.path},
                "identical": self.identical, "counts": self.counts(),
                "rules": [r.as_json() for r in self.rules],
                "settings": {k: {"a": _plain(a), "b": _plain(b)}
                             for k, (a, b) in self.settings.items()},
                "allowlist": self.allowlist}


def _plain(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if hasattr(v, "model_dump"):
        return v.model_dump(mode="json")
    return v


def _allowlist_parts(al: AllowList | None) -> dict[str, set[str]] | None:
    if al is None:
        return None
    modules = {k: m for k, m in al.modules}
    return {
        "builtins": set(al.builtins),
        "modules": set(modules),
        "module_names": {f"{k}.{n}" for k, m in modules.items() for n in m.names},
        "deny_segments": {f"{k}:{s}" for k, m in modules.items() for s in m.deny_segments},
        "attributes": set(al.attributes or ()),
        "kernel_attributes": set(al.kernel_attributes or ()),
    }


def _allowlist_diff(a: AllowList | None, b: AllowList | None) -> dict[str, dict[str, list[str]]]:
    pa, pb = _allowlist_parts(a), _allowlist_parts(b)
    if pa is None and pb is None:
        return {}
    if pa is None or pb is None:
        return {"present": {"only_a": ["allowlist"] if pb is None else [],
                            "only_b": ["allowlist"] if pa is None else []}}
    out = {}
    for part in pa:
        only_a, only_b = sorted(pa[part] - pb[part]), sorted(pb[part] - pa[part])
        if only_a or only_b:
            out[part] = {"only_a": only_a, "only_b": only_b}
    return out


def diff_policies(a: Policy, b: Policy) -> PolicyDiff:
    """Every difference between ``a`` and ``b`` (both resolved), rules in B's order then
    the rules only A has."""
    ra, rb = {r.id: r for r in a.rules}, {r.id: r for r in b.rules}
    rules: list[RuleDiff] = []
    for rid in [*rb, *(r for r in ra if r not in rb)]:
        x, y = ra.get(rid), rb.get(rid)
        sa = effective_severity(a, x) if x is not None else None
        sb = effective_severity(b, y) if y is not None else None
        threat = (y or x).threat  # type: ignore[union-attr]
        if x is None or y is None:
            rules.append(RuleDiff(rid, "added" if x is None else "removed", (sa, sb), threat))
            continue
        params = {k: (getattr(x, k), getattr(y, k)) for k in _PARAMS
                  if getattr(x, k) != getattr(y, k)}
        if params or sa != sb:
            rules.append(RuleDiff(rid, "changed", (sa, sb), threat, params))
    settings = {k: (getattr(a, k), getattr(b, k)) for k in ("promote_warnings", "native_sources")
                if getattr(a, k) != getattr(b, k)}
    return PolicyDiff(a, b, rules, settings, _allowlist_diff(a.allowlist, b.allowlist))
