"""Policies as data: loading, extends, cycles, unknown keys, overrides, promote_warnings."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from grader.cli.scan import register
from grader.errors import PolicyError
from grader.scan import load_policy, scan_source
from grader.scan.policy import effective_severity

RULE = """
[[rules]]
id = "{id}"
severity = "{severity}"
message = "m"
rationale = "r"
threat = "t"
refs = ["{ref}"]
"""


def _write(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(body)
    return path


def test_shipped_policy_chain_is_resolved() -> None:
    strict = load_policy("strict")
    assert strict.chain == ("strict", "triton-only", "default")
    assert strict.promote_warnings is True
    assert strict.rule("require-triton-kernel") is not None
    assert strict.rule("os-module") is not None


def test_every_shipped_rule_has_message_rationale_and_threat() -> None:
    for name in ("default", "triton-only", "cuda-inline", "strict"):
        for rule in load_policy(name).rules:
            assert rule.message and rule.rationale and rule.threat, rule.id


def test_cuda_inline_disables_the_inherited_cpp_extension_rule() -> None:
    assert load_policy("default").rule("cpp-extension") is not None
    assert load_policy("cuda-inline").rule("cpp-extension") is None


def test_triton_only_overrides_inherited_warnings_to_denials() -> None:
    assert load_policy("default").rule("torch-compile").severity == "warn"  # type: ignore[union-attr]
    assert load_policy("triton-only").rule("torch-compile").severity == "deny"  # type: ignore[union-attr]


def test_unknown_policy_name_is_a_policy_error_listing_known_ones() -> None:
    with pytest.raises(PolicyError, match=r"known: .*default"):
        load_policy("no-such-policy")


def test_extends_by_name_resolves_next_to_the_file(tmp_path: Path) -> None:
    _write(tmp_path, "base", RULE.format(id="no-os", severity="deny", ref="os"))
    child = _write(tmp_path, "child", 'extends = "base"\n' + RULE.format(id="no-gc", severity="warn", ref="gc"))
    policy = load_policy(str(child))
    assert policy.chain == ("child", "base")
    assert [r.id for r in policy.rules] == ["no-os", "no-gc"]


def test_extends_cycle_is_a_policy_error_naming_the_cycle(tmp_path: Path) -> None:
    _write(tmp_path, "a", 'extends = "b"\n')
    _write(tmp_path, "b", 'extends = "a"\n')
    with pytest.raises(PolicyError, match=r"cycle a -> b -> a"):
        load_policy(str(tmp_path / "a.toml"))


def test_self_extension_is_a_cycle(tmp_path: Path) -> None:
    path = _write(tmp_path, "me", 'extends = "me"\n')
    with pytest.raises(PolicyError, match="cycle"):
        load_policy(str(path))


def test_unknown_top_level_key_names_file_key_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "p", 'description = "x"\n\npromote_warning = true\n')
    with pytest.raises(PolicyError) as info:
        load_policy(str(path))
    msg = str(info.value)
    assert f"{path}:3" in msg and "promote_warning" in msg


def test_unknown_rule_key_names_the_rule_index_and_its_line(tmp_path: Path) -> None:
    body = RULE.format(id="a", severity="deny", ref="os") + RULE.format(id="b", severity="deny", ref="gc")
    body = body.replace('refs = ["gc"]', 'refs = ["gc"]\nmodules = ["x"]')
    path = _write(tmp_path, "p", body)
    with pytest.raises(PolicyError) as info:
        load_policy(str(path))
    msg = str(info.value)
    line = body.splitlines().index('modules = ["x"]') + 1
    assert f"{path}:{line}" in msg and "rules[1].modules" in msg


def test_bad_severity_value_names_the_key_and_line(tmp_path: Path) -> None:
    body = RULE.format(id="a", severity="block", ref="os")
    path = _write(tmp_path, "p", body)
    with pytest.raises(PolicyError) as info:
        load_policy(str(path))
    line = body.splitlines().index('severity = "block"') + 1
    assert f"{path}:{line}" in str(info.value) and "rules[0].severity" in str(info.value)


def test_missing_rule_key_points_at_the_rule_header(tmp_path: Path) -> None:
    body = 'description = "x"\n' + RULE.format(id="a", severity="deny", ref="os").replace('threat = "t"\n', "")
    path = _write(tmp_path, "p", body)
    with pytest.raises(PolicyError) as info:
        load_policy(str(path))
    line = body.splitlines().index("[[rules]]") + 1
    assert f"{path}:{line}" in str(info.value) and "rules[0].threat" in str(info.value)


def test_invalid_toml_reports_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "p", 'description = "x"\nrules = [\n  { id = \n')
    with pytest.raises(PolicyError, match=rf"{path}: invalid TOML: .*line 3"):
        load_policy(str(path))


def test_rule_without_any_matcher_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, "p", '[[rules]]\nid = "x"\nseverity = "deny"\nmessage = "m"\nrationale = "r"\nthreat = "t"\n')
    with pytest.raises(PolicyError, match="at least one matcher"):
        load_policy(str(path))


def test_disabling_an_unknown_rule_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "p", 'extends = "default"\ndisable = ["os-modul"]\n')
    with pytest.raises(PolicyError, match="os-modul"):
        load_policy(str(path))


def test_override_changes_severity_of_an_inherited_rule(tmp_path: Path) -> None:
    path = _write(tmp_path, "p", 'extends = "default"\n[overrides.os-module]\nseverity = "warn"\n')
    policy = load_policy(str(path))
    result = scan_source("import os\n", policy)
    assert [f.severity for f in result.findings] == ["warn"] and not result.denied


def test_promote_warnings_turns_warnings_into_denials(tmp_path: Path) -> None:
    _write(tmp_path, "base", RULE.format(id="no-gc", severity="warn", ref="gc"))
    path = _write(tmp_path, "p", 'extends = "base"\npromote_warnings = true\n')
    base, promoted = load_policy(str(tmp_path / "base.toml")), load_policy(str(path))
    assert not scan_source("import gc\n", base).denied
    result = scan_source("import gc\n", promoted)
    assert result.denied and result.findings[0].severity == "deny"
    assert effective_severity(promoted, promoted.rules[0]) == "deny"


def test_promote_warnings_is_inherited_unless_restated(tmp_path: Path) -> None:
    _write(tmp_path, "base", 'promote_warnings = true\n' + RULE.format(id="g", severity="warn", ref="gc"))
    _write(tmp_path, "kid", 'extends = "base"\n')
    _write(tmp_path, "off", 'extends = "base"\npromote_warnings = false\n')
    assert load_policy(str(tmp_path / "kid.toml")).promote_warnings
    assert not load_policy(str(tmp_path / "off.toml")).promote_warnings


def test_same_rule_id_in_child_replaces_the_inherited_rule(tmp_path: Path) -> None:
    _write(tmp_path, "base", RULE.format(id="x", severity="deny", ref="os"))
    path = _write(tmp_path, "p", 'extends = "base"\n' + RULE.format(id="x", severity="deny", ref="gc"))
    policy = load_policy(str(path))
    assert not scan_source("import os\n", policy).findings
    assert scan_source("import gc\n", policy).denied


def _cli() -> click.Group:
    group = click.Group("kgrader")
    register(group)
    return group


def test_policy_show_prints_every_resolved_rule_with_severity_and_rationale() -> None:
    result = CliRunner().invoke(_cli(), ["policy", "show", "strict"])
    assert result.exit_code == 0, result.output
    for rule in load_policy("strict").rules:
        assert rule.id in result.output
    assert "strict -> triton-only -> default" in result.output
    assert "promoted from warn" in result.output
    assert "rationale:" in result.output


def test_policy_list_names_every_policy() -> None:
    result = CliRunner().invoke(_cli(), ["policy", "list"])
    assert result.exit_code == 0
    for name in ("default", "triton-only", "cuda-inline", "strict"):
        assert name in result.output


def test_policy_show_unknown_name_exits_2_with_one_line_error() -> None:
    result = CliRunner().invoke(_cli(), ["policy", "show", "nope"])
    assert result.exit_code == 2
    assert result.output.startswith("error: unknown policy") and "Traceback" not in result.output
