"""A field format is named only in its own package and the registries (issue 45, item 2).

No module of ``grader/`` or ``sandbox/`` outside a format's package compares a task's
contract (``contract ==``, ``contract in``) or writes a format's name or wire value as a
string (``"module"``, ``"gpumode"``, ``"dps"``, ``"kernelbench"``, and the test-only
formats' names), except the registries below, each with why; the harness's conventions,
the wire's ``Contract``, the host's formats and the sandbox's problem classes agree; an
unknown contract is refused on both sides; and docs/architecture.md's "How to add a field
format" names only files that exist.
"""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

import pytest
from formats import solstyle

from grader.errors import TaskError
from grader.formats import registry
from grader.formats.base import FieldFormat
from sandbox.contract import wire
from sandbox.contract.conventions import CONVENTIONS, convention

ROOT = Path(__file__).resolve().parents[2]
# Modules that may name wire values or compare contracts: the registries.
REGISTRIES = {
    "sandbox.contract.wire": "the typed wire contract: `Contract`, the values both ends accept",
    "sandbox.contract.conventions": "the harness's registry: each convention's facts by value",
    "sandbox.problem.field": "FIELD_PROBLEMS: the harness's problem classes by wire value",
    "grader.formats.registry": "the host's registry: a task's contract to its format",
}
# (module, string) pairs that are not a format at all, with why.
NOT_A_FORMAT = {
    ("sandbox.judge.main", "module"): "the detail key naming a module Python cannot import",
}
OUT_OF_TREE = (solstyle.FORMAT,)


def _names() -> dict[str, str]:
    """Every format's name and wire value -> the format package allowed to write it."""
    out: dict[str, str] = {}
    for fmt in [*registry.formats(), *OUT_OF_TREE]:
        pkg = type(fmt).__module__ if fmt in OUT_OF_TREE else _package(fmt)
        out.setdefault(fmt.name, pkg)
        out.setdefault(fmt.contract, pkg)
    return out


def _package(fmt: FieldFormat) -> str:
    return f"grader.formats.{fmt.name}"


def _modules() -> dict[str, Path]:
    out = {}
    for tree in ("grader", "sandbox"):
        for p in (ROOT / tree).rglob("*.py"):
            parts = p.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _is_contract(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "contract") or \
        (isinstance(node, ast.Name) and node.id == "contract")


def violations(module: str, source: str, names: dict[str, str]) -> list[str]:
    """What ``module`` (source ``source``) names or compares that only a format may."""
    return [] if module in REGISTRIES else _found(module, source, names)


def _found(module: str, source: str, names: dict[str, str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(map(_is_contract, [node.left, *node.comparators])):
            found.append(f"{module}:{node.lineno} compares a contract: {ast.unparse(node)[:80]}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            own = names[node.value]
            if module == own or module.startswith(own + "."):
                continue
            if (module, node.value) in NOT_A_FORMAT:
                continue
            found.append(f"{module}:{node.lineno} names {node.value!r}")
    return found


def test_no_module_outside_a_format_names_one_or_compares_a_contract() -> None:
    names = _names()
    found = [v for name, path in sorted(_modules().items())
             for v in violations(name, path.read_text(encoding="utf-8"), names)]
    assert not found, "format names outside their package (ask grader.formats.registry or " \
        "sandbox.contract.conventions instead): " + "; ".join(found)


@pytest.mark.parametrize("source", [
    'if spec.contract == "gpumode":\n    pass\n',
    'ok = task.contract in ("module", "gpumode")\n',
    'TEXT = {"kernelbench": 1}\n',
    'x = "solstyle"\n',
])
def test_the_rule_catches_a_planted_comparison_or_name(source: str) -> None:
    assert violations("grader.grading.summary", source, _names())


def test_the_allow_lists_are_still_needed() -> None:
    names = _names()
    for module in REGISTRIES:
        assert _found(module, _modules()[module].read_text(encoding="utf-8"), names), module
    for module, value in NOT_A_FORMAT:
        text = _modules()[module].read_text(encoding="utf-8")
        assert f'"{value}"' in text, (module, value)


def test_conventions_wire_formats_and_problem_classes_agree() -> None:
    from sandbox.problem.field import FIELD_PROBLEMS  # torch: the harness's own module

    assert set(typing.get_args(wire.Contract)) == set(CONVENTIONS)
    assert set(FIELD_PROBLEMS) == {c for c, conv in CONVENTIONS.items() if conv.takes_problem}
    owned = {registry.for_contract(c).contract for c in CONVENTIONS}
    assert owned == set(CONVENTIONS)  # every convention has a format that owns its wording
    assert {f.name for f in registry.formats()} >= {"dps", "kernelbench", "gpumode"}


def test_an_unknown_contract_or_format_is_refused_on_both_sides() -> None:
    from sandbox.runner.returned import Returned

    with pytest.raises(wire.WireFormatError, match="no calling convention"):
        convention("tritonbench")
    with pytest.raises(wire.WireFormatError):
        Returned({"contract": "tritonbench"}, "cpu")
    assert Returned({}, "cpu").active is False  # no contract: destination passing
    with pytest.raises(TaskError):
        registry.for_contract("tritonbench")
    with pytest.raises(TaskError):
        registry.get("tritonbench")
    bad = FieldFormat(name="tritonbench", contract="tritonbench",  # type: ignore[arg-type]
                      agent_text="")
    with pytest.raises(ValueError, match="no calling convention"):
        registry.register(bad)
    with pytest.raises(ValueError, match="registered already"):
        registry.register(registry.get("gpumode"))
    assert "tritonbench" not in registry.importers()


def test_an_out_of_tree_format_is_one_register_line() -> None:
    registry.register(solstyle.FORMAT)
    try:
        assert registry.importers()["solstyle"] is solstyle.FORMAT
        assert registry.for_contract("gpumode").name == "gpumode"  # the owner keeps its wording
    finally:
        registry.unregister("solstyle")
    assert "solstyle" not in registry.importers()
    with pytest.raises(ValueError):
        registry.unregister("gpumode")


SECTION = re.compile(r"^### How to add a field format\n(.*?)(?=^#{2,3} |\Z)", re.M | re.S)
# A ticked path with <name> stands for a format's package: checked against these.
EXAMPLES = {"grader/formats/<name>": "grader/formats/kernelbench"}


def test_the_how_to_names_only_files_that_exist() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = SECTION.search(doc)
    assert section, "docs/architecture.md lacks '### How to add a field format'"
    assert "## How to add a backend, a field format, a check" in doc
    paths = [p for p in re.findall(r"`([^`\s]+)`", section.group(1)) if "/" in p]
    assert len(paths) >= 10, paths
    missing = []
    for p in paths:
        for pattern, example in EXAMPLES.items():
            p = p.replace(pattern, example)
        if not (ROOT / p.rstrip("/")).exists():
            missing.append(p)
    assert not missing, f"the how-to names paths that do not exist: {missing}"
