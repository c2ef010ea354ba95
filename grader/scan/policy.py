"""Policies as data: the TOML schema, loading, ``extends`` resolution.

A policy file holds *what* is denied (rules) and, for the kernel-only policies, what is
*allowed* (an allow-list: everything not on it is denied); the scanners in this package
are the generic mechanism that applies both. Two models:

* :class:`PolicyFile` is one TOML file as written (unknown keys rejected);
* :class:`Policy` is the effective policy after the ``extends`` chain is resolved, with
  ``disable``, ``overrides``, ``promote_warnings`` and ``allowlist`` merged. Scanners only
  see this one.

Errors are :class:`grader.errors.PolicyError` and name the file, the key path and, where
it can be found, the line.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

import grader
from grader.errors import PolicyError, UsageError

Severity = Literal["deny", "warn"]
CheckId = Literal[
    "require-triton-kernel",
    "dynamic-attribute",
    "broad-except-launch",
    "asm-allowlist",
    "native-opaque-source",
    "callable-as-value",
    "format-fields",
    "dunder-string",
    "plain-allocator",
]
OperatorName = Literal["MatMult", "Pow", "Add", "Sub", "Mult", "Div", "FloorDiv", "Mod"]

RULE_ID = r"^[a-z][a-z0-9\-]*$"
MODULE_NAME = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$"
# Rule ids of the allow-list's findings; the mechanism owns them, so no rule may reuse one.
ALLOWLIST_RULE_IDS = frozenset({
    "module-not-allowed", "name-not-allowed", "builtin-not-allowed", "module-as-value",
    "attribute-not-allowed",
})


def policies_dir() -> Path:
    """The shipped ``policies/`` folder at the repository root."""
    return Path(grader.__file__).resolve().parent.parent / "policies"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Rule(_Frozen):
    """One rule: identity and words for people, plus the data its matchers use.

    Name patterns (``refs``, ``allow``, ``writes``, ``calls``) are dotted names after
    import aliases are resolved (``np.load`` -> ``numpy.load``); ``*`` matches any run of
    characters, dots included, so ``os.*`` is everything below ``os``.
    """

    id: str = Field(pattern=RULE_ID, max_length=64)
    severity: Severity
    message: str = Field(min_length=1)
    rationale: str = Field(min_length=1, description="Why it exists; the threat family it belongs to.")
    threat: str = Field(min_length=1, description="The threat family it stops, in short.")
    refs: tuple[str, ...] = Field((), description="Names whose use (import, load, call) matches.")
    allow: tuple[str, ...] = Field(
        (), description="Exceptions to refs, and to attributes where the whole dotted name "
        "resolves (tl.load); for asm-allowlist, mnemonics.")
    writes: tuple[str, ...] = Field((), description="Names whose assignment/deletion matches.")
    write_attrs: tuple[str, ...] = Field((), description="Attribute names whose write matches.")
    attributes: tuple[str, ...] = Field(
        (), description="Attribute names whose access matches, on any object; `*` globs (`__*__`).")
    methods: tuple[str, ...] = Field((), description="Method calls on non-module objects.")
    operators: tuple[OperatorName, ...] = Field((), description="Binary operators (ast names).")
    native: tuple[str, ...] = Field((), description="Regexes over native (C/CUDA) source.")
    calls: tuple[str, ...] = Field((), description="Callables a builtin check inspects.")
    check: CheckId | None = Field(None, description="A builtin check implemented in code.")
    outside_kernels: bool = Field(
        True, description="methods/operators only match outside @triton.jit bodies."
    )
    kernel_calls: tuple[str, ...] = Field(
        (), description="Attribute names this rule does not match inside @triton.jit bodies "
        "when called on a value with one list or tuple display and nothing else (Triton's "
        "tensor descriptors: desc.load([off])).")

    @model_validator(mode="after")
    def _has_matcher(self) -> Rule:
        if not (self.refs or self.writes or self.write_attrs or self.attributes
                or self.methods or self.operators or self.native or self.check):
            raise ValueError("a rule needs at least one matcher (refs, writes, ..., check)")
        for pattern in self.native:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"bad native regex {pattern!r}: {e}") from e
        return self


class RuleOverride(_Frozen):
    """Changes an inherited rule without restating it."""

    severity: Severity | None = None
    message: str | None = None


class NativeSource(_Frozen):
    """A call whose arguments are native source (scanned with the ``native`` rules)."""

    call: str
    positions: tuple[int, ...] = ()
    keywords: tuple[str, ...] = ()


class AllowedModule(_Frozen):
    """One module a kernel may import, and the names below it that it may use."""

    why: str = Field(min_length=1, description="What a kernel needs from it; quoted in findings.")
    names: tuple[str, ...] = Field(
        (), description="Names below the module, relative to it (`empty`, `cuda.synchronize`); "
        "`*` spans dots. The module itself is always allowed as an import and as the base of "
        "a dotted name, never as a value.")
    deny_segments: tuple[str, ...] = Field(
        (), description="Attribute names (fnmatch patterns) denied anywhere below the module "
        "even where `names` match: submodules that re-export os/builtins/inspect, privates.")

    @model_validator(mode="after")
    def _patterns_are_sane(self) -> AllowedModule:
        for name in self.names:
            if not name or name.startswith(".") or name.endswith("."):
                raise ValueError(f"bad allowed name {name!r} (relative dotted name, * globs)")
        for seg in self.deny_segments:
            if not seg or "." in seg:
                raise ValueError(f"bad deny segment {seg!r} (one attribute name, no dots)")
        return self


class AllowListFile(_Frozen):
    """``[allowlist]`` as written; a key left out inherits the parent's value."""

    rationale: str | None = Field(None, min_length=1, description="Why this is an allow-list.")
    builtins: tuple[str, ...] | None = Field(
        None, description="Builtins (and module dunders such as __name__) the candidate may use.")
    modules: dict[str, AllowedModule] = Field(
        default_factory=dict, description="Importable modules by dotted name; a child's entry "
        "replaces the parent's entry of the same module.")
    attributes: tuple[str, ...] | None = Field(
        None, description="Attribute names allowed on values (tensors, storages, anything not "
        "a listed module) outside @triton.jit functions; besides these, only names the file "
        "defines itself. Left out everywhere in the chain: attributes are not checked.")
    kernel_attributes: tuple[str, ...] | None = Field(
        None, description="The same inside @triton.jit functions (Triton's tensor and dtype "
        "API), whose bodies run as Python under TRITON_INTERPRET. Left out: not checked.")

    @model_validator(mode="after")
    def _module_names(self) -> AllowListFile:
        for key in self.modules:
            if not re.match(MODULE_NAME, key):
                raise ValueError(f"bad module name {key!r}")
        for name in (*(self.attributes or ()), *(self.kernel_attributes or ())):
            if not re.match(r"^[A-Za-z_]\w*$", name):
                raise ValueError(f"bad attribute name {name!r} (one identifier, no globs)")
        return self


class AllowList(_Frozen):
    """The effective allow-list: anything not listed here is denied."""

    rationale: str
    builtins: tuple[str, ...]
    modules: tuple[tuple[str, AllowedModule], ...] = Field(
        description="(module, entry) pairs, sorted by module name.")
    attributes: tuple[str, ...] | None = Field(
        None, description="Attribute names allowed on values outside kernels; None: unchecked.")
    kernel_attributes: tuple[str, ...] | None = Field(
        None, description="Attribute names allowed on values inside kernels; None: unchecked.")

    def module(self, key: str) -> AllowedModule | None:
        return next((m for k, m in self.modules if k == key), None)


class PolicyFile(_Frozen):
    """One ``policies/*.toml`` file as written."""

    description: str = ""
    extends: str | None = None
    promote_warnings: bool | None = Field(None, description="None inherits the parent's.")
    disable: tuple[str, ...] = ()
    overrides: dict[str, RuleOverride] = Field(default_factory=dict)
    native_sources: tuple[NativeSource, ...] = ()
    allowlist: AllowListFile | None = None
    rules: tuple[Rule, ...] = ()


class Policy(_Frozen):
    """The effective policy the scanners apply."""

    name: str
    description: str
    path: str
    chain: tuple[str, ...] = Field(description="This policy, then its ancestors.")
    promote_warnings: bool
    native_sources: tuple[NativeSource, ...]
    rules: tuple[Rule, ...]
    allowlist: AllowList | None = Field(
        None, description="When set, imports, module names and builtins not listed are denied.")

    def rule(self, rule_id: str) -> Rule | None:
        return next((r for r in self.rules if r.id == rule_id), None)


def list_policies() -> list[str]:
    """Names of the shipped policies (``policies/*.toml``)."""
    folder = policies_dir()
    return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


def _find(name_or_path: str, near: Path | None) -> Path:
    candidate = Path(name_or_path)
    looks_like_path = name_or_path.endswith(".toml") or "/" in name_or_path
    if looks_like_path:
        if not candidate.is_absolute() and near is not None and (near / candidate).is_file():
            return (near / candidate).resolve()
        if candidate.is_file():
            return candidate.resolve()
        raise PolicyError(f"policy file not found: {name_or_path}")
    for folder in ([near] if near is not None else []) + [policies_dir()]:
        path = folder / f"{name_or_path}.toml"
        if path.is_file():
            return path.resolve()
    known = ", ".join(list_policies()) or "none"
    raise PolicyError(f"unknown policy {name_or_path!r} (known: {known})")


def _loc_text(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _locate(text: str, loc: tuple[int | str, ...]) -> int | None:
    """Best-effort line of a key path such as ``('rules', 3, 'severity')``."""
    lines = text.splitlines()
    start, end, fallback = 0, len(lines), None
    keys = [p for p in loc if isinstance(p, str)]
    if len(loc) >= 2 and isinstance(loc[0], str) and isinstance(loc[1], int):
        headers = [i for i, ln in enumerate(lines) if ln.strip() == f"[[{loc[0]}]]"]
        if loc[1] < len(headers):
            start = headers[loc[1]]
            nxt = [i for i, ln in enumerate(lines[start + 1:], start + 1) if ln.lstrip().startswith("[")]
            end = nxt[0] if nxt else len(lines)
            keys = [p for p in loc[2:] if isinstance(p, str)]
            fallback = start + 1  # a missing key: point at its [[table]] header
            if not keys:
                return fallback
    for key in reversed(keys):
        pat = re.compile(rf"^\s*(\[+\s*)?[\"']?{re.escape(key)}[\"']?\s*(=|\]|\.)")
        for i in range(start, end):
            if pat.match(lines[i]):
                return i + 1
    return fallback


# Policy files parsed so far, by their text (frozen models): every evaluation scans, a warm
# pool's twice, and parsing the shipped chain took ~18 ms a load on a 2-core host.
_PARSED: dict[str, PolicyFile] = {}
_PARSED_MAX = 64


def _read(path: Path) -> PolicyFile:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise PolicyError(f"{path}: cannot read policy: {e}") from e
    known = _PARSED.get(text)
    if known is not None:
        return known
    own = _parse(path, text)
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[text] = own
    return own


def _parse(path: Path, text: str) -> PolicyFile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PolicyError(f"{path}: invalid TOML: {e}") from e
    try:
        return PolicyFile.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = tuple(err["loc"])
            line = _locate(text, loc)
            where = f"{path}:{line}" if line else str(path)
            problems.append(f"{where}: key {_loc_text(loc)!r}: {err['msg']}")
        raise PolicyError("; ".join(problems)) from e


def _merge(parent: Policy | None, own: PolicyFile, name: str, path: Path) -> Policy:
    rules: dict[str, Rule] = {r.id: r for r in parent.rules} if parent else {}
    inherited = set(rules)
    for rule_id in own.disable:
        if rule_id not in inherited:
            raise PolicyError(f"{path}: key 'disable': no inherited rule {rule_id!r}")
        del rules[rule_id]
    for rule_id, change in own.overrides.items():
        if rule_id not in rules:
            raise PolicyError(f"{path}: key 'overrides.{rule_id}': no inherited rule {rule_id!r}")
        rules[rule_id] = rules[rule_id].model_copy(update=change.model_dump(exclude_none=True))
    seen: set[str] = set()
    for rule in own.rules:
        if rule.id in seen:
            raise PolicyError(f"{path}: rule id {rule.id!r} defined twice")
        seen.add(rule.id)
        rules[rule.id] = rule  # same id as an inherited rule: replaces it
    promote = own.promote_warnings
    if promote is None:
        promote = parent.promote_warnings if parent else False
    natives = {n.call: n for n in (parent.native_sources if parent else ())}
    natives.update({n.call: n for n in own.native_sources})
    allowlist = _merge_allowlist(parent.allowlist if parent else None, own.allowlist, path)
    if allowlist is not None:
        clash = sorted(ALLOWLIST_RULE_IDS & set(rules))
        if clash:
            raise PolicyError(f"{path}: rule id {clash[0]!r} is reserved for allow-list findings")
    return Policy(
        name=name,
        description=own.description or (parent.description if parent else ""),
        path=str(path),
        chain=(name, *(parent.chain if parent else ())),
        promote_warnings=promote,
        native_sources=tuple(natives.values()),
        rules=tuple(rules.values()),
        allowlist=allowlist,
    )


def _merge_allowlist(parent: AllowList | None, own: AllowListFile | None,
                     path: Path) -> AllowList | None:
    if own is None:
        return parent
    rationale = own.rationale or (parent.rationale if parent else None)
    if rationale is None:
        raise PolicyError(f"{path}: key 'allowlist.rationale': required (nothing to inherit)")
    builtins = own.builtins if own.builtins is not None else (parent.builtins if parent else ())
    modules = dict(parent.modules) if parent else {}
    modules.update(own.modules)
    attributes = own.attributes if own.attributes is not None else (
        parent.attributes if parent else None)
    kernel = own.kernel_attributes if own.kernel_attributes is not None else (
        parent.kernel_attributes if parent else None)
    return AllowList(rationale=rationale, builtins=builtins,
                     modules=tuple(sorted(modules.items())), attributes=attributes,
                     kernel_attributes=kernel)


def _resolve(path: Path, stack: tuple[Path, ...]) -> Policy:
    if path in stack:
        cycle = " -> ".join(p.stem for p in (*stack, path))
        raise PolicyError(f"{path}: key 'extends': cycle {cycle}")
    own = _read(path)
    parent = None
    if own.extends is not None:
        try:
            parent_path = _find(own.extends, path.parent)
        except PolicyError as e:
            raise PolicyError(f"{path}: key 'extends': {e}") from e
        parent = _resolve(parent_path, (*stack, path))
    return _merge(parent, own, path.stem, path)


def load_policy(name_or_path: str) -> Policy:
    """Load a shipped policy by name, or any policy file by path; resolve ``extends``."""
    return _resolve(_find(name_or_path, None), ())


# Policies that name what a kernel file may use; their tasks get the judge's runtime op audit.
KERNEL_ONLY_POLICIES = frozenset({"triton-only"})


def kernel_only(name_or_path: str) -> bool:
    """Whether a task's own policy (not the policy a run scans with) is, or extends, a
    kernel-only policy. The runtime audit follows the task, so it holds with the scan
    switched off; a policy that does not load gets the strictest audit (fails closed)."""
    try:
        chain = load_policy(name_or_path).chain
    except UsageError:
        return True
    return bool(KERNEL_ONLY_POLICIES & set(chain))


def effective_severity(policy: Policy, rule: Rule) -> Severity:
    return "deny" if policy.promote_warnings else rule.severity
