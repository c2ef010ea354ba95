"""Every error code is created from the catalogue (sandbox/contract/codes.py), and nothing
else: an AST walk over grader/ and sandbox/ finds each code passed to an error's
constructor or helper (a literal, a local or module constant, a helper's return value, a
parameter's default, the branches of a conditional), refuses a code it cannot trace (an
f-string, a format call, a computed string), and every catalogue entry must be created
somewhere. The schema, docs/errors.md and the runtime checks follow from the same table."""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grader.limits import LimitName
from grader.report.model import report_json_schema
from grader.report.record import ResultProblem, read_result
from grader.scan.policy import RULE_ID, load_policy
from sandbox.contract import codes, wire
from sandbox.contract.failure import StageFailure, infrastructure
from sandbox.launcher.proc import _runner_error

ROOT = Path(__file__).resolve().parents[2]
# Callables that take an error code: name -> (positional index, keyword names).
TAKERS: dict[str, tuple[int | None, tuple[str, ...]]] = {
    "StageFailure": (1, ("code",)), "infrastructure": (0, ("code",)),
    "ErrorWire": (None, ("code",)), "ReportError": (None, ("code",)),
    "RunnerFailure": (0, ("code",)), "ResultProblem": (0, ("code",)),
    "_infra": (0, ("code",)), "_error": (0, ("code",)), "_err": (0, ("code",)),
    "error_dict": (1, ("code",)), "receive": (1, ("timeout_code",)),
    "request": (2, ("timeout_code",)), "emit_error": (None, ("code",)),
    "error_document": (None, ("code",)), "ApiError": (0, ("code",)),
}
# Helpers whose result is a catalogued code by construction (checked at run time).
CHECKED_CALLS = {"runner_code"}
PREFIXES = {"", codes.CURRENT}


@dataclass
class Found:
    created: dict[str, list[str]] = field(default_factory=dict)  # code -> where
    compared: dict[str, list[str]] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)  # untraceable codes
    no_origin: list[tuple[str, str]] = field(default_factory=list)  # (code, where): StageFailure
    origin_given: list[tuple[str, str, str]] = field(default_factory=list)  # (code, origin, where)


class _Module:
    def __init__(self, rel: str, tree: ast.Module, consts: dict[str, list[ast.expr]]) -> None:
        self.rel, self.tree, self.consts = rel, tree, consts
        self.parent: dict[ast.AST, ast.AST] = {}
        for n in ast.walk(tree):
            for c in ast.iter_child_nodes(n):
                self.parent[c] = n
        self.functions = {n.name: n for n in ast.walk(tree)
                          if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}

    def enclosing(self, node: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        out = []
        while node in self.parent:
            node = self.parent[node]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out.append(node)
        return out


def _assigned(scope: ast.AST, name: str) -> list[ast.expr]:
    """Values ``name`` is given in ``scope`` (plain, annotated and tuple assignments)."""
    out: list[ast.expr] = []
    for n in ast.walk(scope):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name) and t.id == name:
                    out.append(n.value)
                elif isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple):
                    out += [v for e, v in zip(t.elts, n.value.elts, strict=False)
                            if isinstance(e, ast.Name) and e.id == name]
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) \
                and n.target.id == name and n.value is not None:
            out.append(n.value)
    return out


def _bound(scope: ast.AST, name: str) -> bool:
    """Whether ``name`` is bound by a loop, a comprehension, an ``except`` or a ``with``."""
    for n in ast.walk(scope):
        targets: list[ast.AST] = []
        if isinstance(n, ast.For | ast.comprehension):
            targets = [n.target]
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            targets = [n.optional_vars]
        elif isinstance(n, ast.ExceptHandler) and n.name == name:
            return True
        if any(isinstance(t, ast.Name) and t.id == name for x in targets for t in ast.walk(x)):
            return True
    return False


def _param(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> tuple[bool, ast.expr | None]:
    a = fn.args
    pos = [*a.posonlyargs, *a.args]
    defaults: dict[str, ast.expr | None] = {p.arg: None for p in [*pos, *a.kwonlyargs]}
    for p, d in zip(pos[len(pos) - len(a.defaults):], a.defaults, strict=True):
        defaults[p.arg] = d
    for p, kd in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        defaults[p.arg] = kd
    return (name in defaults), defaults.get(name)


class _Walker:
    def __init__(self, mod: _Module, found: Found) -> None:
        self.mod, self.found = mod, found

    def where(self, node: ast.AST) -> str:
        return f"{self.mod.rel}:{getattr(node, 'lineno', 0)}"

    def codes_of(self, node: ast.expr, at: ast.AST, depth: int = 0) -> Iterator[str]:
        """Every string ``node`` can be, as a code; a refusal for what cannot be traced."""
        if depth > 6:
            self.found.refused.append(f"{self.where(at)}: too deep")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, ast.Constant) and node.value is None:
            return  # no code given: the callee's own default
        elif isinstance(node, ast.IfExp):
            yield from self.codes_of(node.body, at, depth + 1)
            yield from self.codes_of(node.orelse, at, depth + 1)
        elif isinstance(node, ast.BoolOp):
            for v in node.values:
                yield from self.codes_of(v, at, depth + 1)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            lefts = set(self.codes_of(node.left, at, depth + 1)) if not isinstance(node.left, ast.Name) \
                else set()
            if lefts - PREFIXES:
                self.found.refused.append(f"{self.where(at)}: prefix {sorted(lefts - PREFIXES)}")
            yield from self.codes_of(node.right, at, depth + 1)
        elif isinstance(node, ast.Name):
            yield from self.name(node.id, at, depth)
        elif isinstance(node, ast.Attribute):
            if node.attr.isupper():  # a module constant: identity.ISOLATION_CODE
                for v in self.mod.consts.get(node.attr, []):
                    yield from self.codes_of(v, at, depth + 1)
            # else a code passed on (e.code, p.code, outcome.limit_fired): made elsewhere
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in self.mod.functions:
            for r in ast.walk(self.mod.functions[node.func.id]):
                if isinstance(r, ast.Return) and r.value is not None:
                    yield from self.codes_of(r.value, at, depth + 1)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in CHECKED_CALLS:
            return
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and isinstance(node.func.value, ast.Dict):
            for v in [*node.func.value.values, *node.args[1:]]:  # {status: code}.get(s, default)
                yield from self.codes_of(v, at, depth + 1)
        else:  # an f-string, a format call, a computed string
            self.found.refused.append(f"{self.where(at)}: {ast.unparse(node)[:80]}")

    def name(self, name: str, at: ast.AST, depth: int) -> Iterator[str]:
        for fn in self.mod.enclosing(at):
            values = _assigned(fn, name)
            is_param, default = _param(fn, name)
            if values or is_param:
                for v in values + ([default] if default is not None else []):
                    if not (isinstance(v, ast.BoolOp) and any(  # code = code or e.code
                            isinstance(x, ast.Name) and x.id == name for x in v.values)):
                        yield from self.codes_of(v, at, depth + 1)
                    else:
                        for x in v.values:
                            if not (isinstance(x, ast.Name) and x.id == name):
                                yield from self.codes_of(x, at, depth + 1)
                return
            if _bound(fn, name):
                return  # a loop, comprehension or except name: a code passed on
        values = self.mod.consts.get(name, [])
        if not values:
            self.found.refused.append(f"{self.where(at)}: cannot trace {name}")
        for v in values:
            yield from self.codes_of(v, at, depth + 1)

    def add(self, into: dict[str, list[str]], node: ast.expr, at: ast.AST) -> list[str]:
        got = list(self.codes_of(node, at))
        for c in got:
            into.setdefault(c, []).append(self.where(at))
        return got

    def call(self, n: ast.Call) -> None:
        f = n.func
        fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        spec = TAKERS.get(fname, (None, ("code",)) if fname.endswith("Error") else None)
        if spec is None:
            return
        pos, kws = spec
        args = [n.args[pos]] if pos is not None and len(n.args) > pos else []
        args += [k.value for k in n.keywords if k.arg in kws]
        made = [c for a in args for c in self.add(self.found.created, a, n)]
        if fname == "StageFailure":
            origin = next((k.value for k in n.keywords if k.arg == "origin"), None)
            for c in made:
                if origin is None:
                    self.found.no_origin.append((c, self.where(n)))
                elif isinstance(origin, ast.Constant):
                    self.found.origin_given.append((c, str(origin.value), self.where(n)))

    def walk(self) -> None:
        for n in ast.walk(self.mod.tree):
            if isinstance(n, ast.Call):
                self.call(n)
            elif isinstance(n, ast.Dict):
                for k, v in zip(n.keys, n.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value == "code" and not isinstance(v, ast.Dict):
                        self.add(self.found.created, v, n)
            elif isinstance(n, ast.ClassDef):
                for v in _class_codes(n):
                    self.add(self.found.created, v, n)
            elif isinstance(n, ast.Compare):
                self.compare(n)
            elif isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith("_CODES")
                                                   and t.id != "DTYPE_CODES" for t in n.targets):
                for c in ast.walk(n.value):
                    if isinstance(c, ast.Constant) and isinstance(c.value, str):
                        self.found.compared.setdefault(c.value, []).append(self.where(n))

    def compare(self, n: ast.Compare) -> None:
        sides = [n.left, *n.comparators]
        if not any(_is_code_expr(s) for s in sides):
            return
        for s in sides:
            for c in ast.walk(s):
                if isinstance(c, ast.Constant) and isinstance(c.value, str) \
                        and not (isinstance(s, ast.Call) and c in s.args):
                    self.found.compared.setdefault(c.value, []).append(self.where(n))


def _class_codes(n: ast.ClassDef) -> list[ast.expr]:
    out: list[ast.expr] = []
    for s in n.body:  # a class attribute ``code = "..."`` (a pydantic field is not one)
        plain = isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "code"
                                                  for t in s.targets)
        annotated = isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) \
            and s.target.id == "code" and isinstance(s.value, ast.Constant)
        if (plain or annotated) and isinstance(s, ast.Assign | ast.AnnAssign) and s.value is not None:
            out.append(s.value)
    return out


def _is_code_expr(e: ast.expr) -> bool:
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "removeprefix":
        return _is_code_expr(e.func.value)
    return (isinstance(e, ast.Attribute) and e.attr == "code") or \
        (isinstance(e, ast.Name) and re.search(r"(^|_)code$", e.id) is not None)


def scan(sources: dict[str, str]) -> Found:
    trees = {rel: ast.parse(src) for rel, src in sources.items()}
    consts: dict[str, list[ast.expr]] = {}
    for tree in trees.values():
        for s in tree.body:
            if isinstance(s, ast.Assign):
                for t in s.targets:
                    if isinstance(t, ast.Name) and t.id.isupper():
                        consts.setdefault(t.id, []).append(s.value)
    found = Found()
    for rel, tree in trees.items():
        _Walker(_Module(rel, tree, consts), found).walk()
    return found


def _tree() -> dict[str, str]:
    out = {}
    for pkg in ("grader", "sandbox"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            if p != ROOT / "sandbox" / "contract" / "codes.py":
                out[str(p.relative_to(ROOT))] = p.read_text(encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def found() -> Found:
    return scan(_tree())


def _rule_ids() -> set[str]:
    """Scan-stage codes: the shipped policies' rule ids and the scanner's own."""
    ids = {r.id for toml in (ROOT / "policies").glob("*.toml") for r in load_policy(toml.stem).rules}
    for p in (ROOT / "grader" / "scan").glob("*.py"):
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and "-" in n.value \
                    and re.fullmatch(codes.RULE_ID, n.value):
                ids.add(n.value)
    return ids


def _known(code: str) -> bool:
    try:
        codes.lookup(code)
    except codes.UnknownCode:
        return False
    return True


# ---- the walk over grader/ and sandbox/ ---------------------------------------------------
def test_every_code_created_in_grader_and_sandbox_is_in_the_catalogue(found: Found) -> None:
    assert len(found.created) > 60  # the walk sees the tree (not vacuously green)
    unknown = {c: w for c, w in found.created.items() if not _known(c)}
    assert not unknown, f"codes not in sandbox/contract/codes.py: {unknown}"


def test_no_code_is_made_in_a_way_the_walk_cannot_trace(found: Found) -> None:
    assert not found.refused, f"build codes from literals only: {found.refused}"


def test_every_code_compared_or_listed_is_in_the_catalogue(found: Found) -> None:
    rules = _rule_ids()
    assert {"syntax-error", "name-not-allowed", "os-module"} <= rules
    unknown = {c: w for c, w in found.compared.items() if not _known(c) and c not in rules}
    assert not unknown, f"code comparisons with codes nobody defines: {unknown}"


def test_every_catalogue_entry_is_created_somewhere(found: Found) -> None:
    made = set(found.created) | set(typing.get_args(LimitName))  # a limit that fired is a code
    made |= {c.removeprefix(codes.CURRENT) for c in made}
    dead = [c.name for c in codes.CATALOGUE if c.name not in made]
    assert not dead, f"catalogue entries nothing creates: {dead}"


def test_a_limit_name_is_a_report_code() -> None:
    assert all(codes.is_report_code(n) for n in typing.get_args(LimitName))


def test_origin_is_the_catalogue_s_or_one_it_allows(found: Found) -> None:
    ambiguous = [(c, w) for c, w in found.no_origin if _known(c) and len(codes.lookup(c).origins) > 1]
    assert not ambiguous, f"StageFailure without origin for a code that can be either: {ambiguous}"
    wrong = [(c, o, w) for c, o, w in found.origin_given
             if _known(c) and o not in codes.lookup(c).origins]
    assert not wrong, f"StageFailure with an origin the catalogue does not allow: {wrong}"


# ---- the walk itself: it would fail if the rules it enforces broke -------------------------
def test_the_walk_refuses_an_f_string_a_format_call_and_a_computed_code() -> None:
    f = scan({"m.py": 'def g(x, n):\n'
                      '    raise StageFailure("compile", f"bad_{x}", "m")\n'
                      '    raise infrastructure("{}_x".format(n), "m")\n'
                      '    raise RunnerFailure(x.lower(), "m")\n'})
    assert len(f.refused) == 3


def test_the_walk_traces_locals_constants_helpers_defaults_and_prefixes() -> None:
    f = scan({"a.py": 'ISO_CODE = "iso"\n'
                      'def _classify(e):\n'
                      '    return "lim" if e else "exc"\n'
                      'def h(e, stage, current, timeout_code="late"):\n'
                      '    code = "cmp" if e else e.code\n'
                      '    raise StageFailure(stage, code, "m")\n'
                      '    raise StageFailure(stage, ("current_" if current else "") + "spawn", "m",\n'
                      '                       origin="candidate")\n'
                      '    raise RunnerFailure(timeout_code, "m")\n'
                      '    return _error(_classify(e), e), {"code": "dict"}\n',
              "b.py": 'from a import ISO_CODE\nimport a\n'
                      'class E(UsageError):\n    code = "cls"\n'
                      'def k(e):\n    raise infrastructure(a.ISO_CODE, "m")\n'
                      '    if e.code in ("cmp1", "cmp2"):\n        raise UsageError("m", code="kw")\n'})
    assert not f.refused
    assert set(f.created) == {"iso", "lim", "exc", "cmp", "spawn", "late", "dict", "cls", "kw"}
    assert set(f.compared) == {"cmp1", "cmp2"}
    assert ("cmp", "a.py:6") in f.no_origin and ("spawn", "candidate", "a.py:7") in f.origin_given


# ---- the catalogue's own shape ------------------------------------------------------------
def test_catalogue_entries_are_unique_well_formed_and_explained() -> None:
    names = [c.name for c in codes.CATALOGUE]
    assert len(names) == len(set(names))
    stages = set(typing.get_args(wire.ErrorStage))
    for c in codes.CATALOGUE:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", c.name) and len(codes.CURRENT + c.name) <= 64
        assert c.meaning.endswith(".") and c.action.endswith("."), c.name
        assert c.where and set(c.where) <= {"report", "host", "api"}, c.name
        if "report" in c.where:
            assert c.stages and set(c.stages) <= stages, c.name
            assert c.origins and set(c.origins) <= set(typing.get_args(wire.Origin)), c.name
        else:
            assert not c.stages and not c.current and not c.runner and c.origins, c.name
    blamable = {c.name for c in codes.CATALOGUE if "candidate" in c.origins}
    assert codes.RUNNER_CODES.issubset(blamable)


def test_scan_codes_are_rule_ids_and_never_a_catalogue_code() -> None:
    assert RULE_ID == codes.RULE_ID
    for toml in sorted((ROOT / "policies").glob("*.toml")):
        for rule in load_policy(toml.stem).rules:
            assert re.fullmatch(codes.RULE_ID, rule.id) and rule.id not in codes.BY_NAME


# ---- what the catalogue drives --------------------------------------------------------------
def test_docs_errors_md_is_generated_from_the_catalogue() -> None:
    doc = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    assert doc == codes.markdown() + "\n", "docs/errors.md is stale: python3 scripts/errors_doc.py"
    for c in codes.CATALOGUE:
        assert f"`{c.name}`" in doc


def test_report_schema_enumerates_exactly_the_report_codes() -> None:
    prop = report_json_schema()["$defs"]["ReportError"]["properties"]["code"]
    enum, rule = prop["anyOf"]
    assert enum["enum"] == list(codes.report_codes()) and rule["pattern"] == codes.RULE_ID
    assert "current_wrong_values" in enum["enum"] and "bad_task" not in enum["enum"]
    assert "current_judge_error" not in enum["enum"]


def test_stage_failure_takes_its_origin_from_the_catalogue_and_refuses_the_rest() -> None:
    assert StageFailure("correctness", "wrong_values", "m").error.origin == "candidate"
    assert infrastructure("reference_failed", "m").error.origin == "infrastructure"
    assert StageFailure("accept", "wrong_values", "m").renamed("current_").error.code == \
        "current_wrong_values"
    with pytest.raises(codes.UnknownCode):
        StageFailure("correctness", "not_a_code", "m")
    with pytest.raises(codes.UnknownCode):
        StageFailure("correctness", "wrong_values", "m", origin="infrastructure")
    with pytest.raises(codes.UnknownCode):
        StageFailure("sandbox", "judge_error", "m").renamed("current_")
    with pytest.raises(codes.UnknownCode):
        StageFailure("sandbox", "bad_task", "m")  # a host code
    with pytest.raises(codes.UnknownCode):
        codes.origin_of("result_malformed")  # two origins: the call site must say which
    assert codes.origin_of("result_malformed", "infrastructure") == "infrastructure"


def test_host_error_classes_carry_host_codes(found: Found) -> None:
    import grader.errors as errors

    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, errors.KgraderError):
            assert "host" in codes.lookup(cls.code).where, cls
    assert {"usage", "sandbox_unavailable", "image_missing"} <= set(found.created)


def test_a_runner_names_only_its_own_codes() -> None:
    f = _runner_error({"code": "wrong_values", "message": "m"})
    assert f.code == "exception" and f.detail is not None and f.detail["runner_code"] == "wrong_values"
    assert _runner_error({"code": "syntax", "message": "m"}).code == "syntax"
    assert _runner_error({"code": "judge_died"}).code == "exception"


def test_an_authentic_record_with_an_uncatalogued_code_is_malformed(tmp_path: Path) -> None:
    key = b"k" * 32
    for code, origin in (("made_up", "candidate"), ("reference_failed", "candidate")):
        err = wire.ErrorWire(stage="sandbox", code=code, origin=origin, message="m")  # type: ignore[arg-type]
        rec = wire.Record(wire_version=wire.WIRE_VERSION, stage="sandbox", errors=(err,),
                          warnings=(), device="cpu", environment={})
        body = wire.dumps(rec)
        p = tmp_path / "result.json"
        p.write_text(json.dumps({"payload": body,
                                 "mac": hmac.new(key, body.encode(), hashlib.sha256).hexdigest()}))
        with pytest.raises(ResultProblem) as info:
            read_result(p, key, 1 << 20)
        assert info.value.code == "result_malformed" and info.value.authentic
