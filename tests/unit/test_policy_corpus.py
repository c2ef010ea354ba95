"""The attack and legit corpora, run through `kgrader policy test` exactly as a reviewer would."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from grader.cli.scan import register
from grader.scan import list_policies, load_policy
from grader.scan.corpus import run_corpus

TESTS = Path(__file__).resolve().parent.parent
ATTACKS = TESTS / "attacks"
LEGIT = TESTS / "legit"
# Legit for `default` (and cuda-inline, which extends it) but outside the kernel-only
# allow-lists: sys facts, warnings, dunder names in string data.
LEGIT_DEFAULT = LEGIT / "default"
ALLOWLIST_POLICIES = ["triton-only", "strict"]


@pytest.fixture(scope="module")
def cli() -> click.Group:
    group = click.Group("kgrader")
    register(group)
    return group


def _policy_test(cli: click.Group, policy: str, folder: Path) -> None:
    result = CliRunner().invoke(cli, ["policy", "test", policy, str(folder)])
    assert result.exit_code == 0, result.output
    assert "0 mismatches" in result.output


def test_shipped_policies_are_the_four_documented_ones() -> None:
    assert {"default", "triton-only", "cuda-inline", "strict"} <= set(list_policies())


@pytest.mark.parametrize("policy", ["default", "triton-only", "strict"])
def test_every_attack_family_is_denied_by_its_rule(cli: click.Group, policy: str) -> None:
    _policy_test(cli, policy, ATTACKS)


@pytest.mark.parametrize("policy", ["triton-only", "strict"])
def test_library_fallbacks_and_replay_are_denied_by_triton_only(cli: click.Group, policy: str) -> None:
    _policy_test(cli, policy, ATTACKS / "triton_only")


def test_promoted_warnings_are_denied_by_strict(cli: click.Group) -> None:
    _policy_test(cli, "strict", ATTACKS / "strict")


def test_native_source_attacks_are_denied_by_cuda_inline(cli: click.Group) -> None:
    _policy_test(cli, "cuda-inline", ATTACKS / "cuda_inline")


@pytest.mark.parametrize("policy", list_policies())
def test_every_legit_kernel_is_allowed_by_every_shipped_policy(cli: click.Group, policy: str) -> None:
    _policy_test(cli, policy, LEGIT)


@pytest.mark.parametrize("policy", ["default", "cuda-inline"])
def test_default_only_legit_files_are_allowed_outside_the_allow_lists(cli: click.Group,
                                                                      policy: str) -> None:
    _policy_test(cli, policy, LEGIT_DEFAULT)


@pytest.mark.parametrize("policy", ALLOWLIST_POLICIES)
def test_default_only_legit_files_are_denied_by_the_allow_lists(policy: str) -> None:
    cases = run_corpus(load_policy(policy), LEGIT_DEFAULT)
    assert len(cases) >= 2
    assert all(c.got == "deny" for c in cases), [c.file for c in cases if c.got != "deny"]


def test_catch_all_around_a_launch_is_denied_by_triton_only() -> None:
    (case,) = [c for c in run_corpus(load_policy("triton-only"), ATTACKS / "strict")
               if c.file == "try_except_fallback.py"]
    assert case.got == "deny" and "broad-except-fallback" in case.rules


def test_benign_load_inline_kernel_is_allowed_by_cuda_inline(cli: click.Group) -> None:
    _policy_test(cli, "cuda-inline", LEGIT / "cuda_inline")


def test_benign_load_inline_kernel_is_denied_by_default() -> None:
    cases = run_corpus(load_policy("default"), LEGIT / "cuda_inline")
    assert cases and all(c.got == "deny" and "cpp-extension" in c.rules for c in cases)


def test_warn_only_attacks_are_allowed_but_reported_by_default() -> None:
    cases = run_corpus(load_policy("default"), ATTACKS / "strict")
    assert cases and all(c.got == "allow" for c in cases)


def test_corpus_sizes_cover_the_threat_families() -> None:
    assert len(list(ATTACKS.glob("*.py"))) >= 40
    assert len(list(LEGIT.glob("*.py"))) >= 20


def test_policy_test_reports_a_mismatch_and_exits_1(cli: click.Group, tmp_path: Path) -> None:
    (tmp_path / "wrong.py").write_text("# expect: allow\nimport os\n")
    (tmp_path / "right.py").write_text("# expect: deny os-module\nimport os\n")
    result = CliRunner().invoke(cli, ["policy", "test", "default", str(tmp_path)])
    assert result.exit_code == 1
    assert "MISMATCH" in result.output and "1 mismatches" in result.output


def test_policy_test_treats_a_missing_header_as_a_mismatch(cli: click.Group, tmp_path: Path) -> None:
    (tmp_path / "noheader.py").write_text("x = 1\n")
    result = CliRunner().invoke(cli, ["policy", "test", "default", str(tmp_path)])
    assert result.exit_code == 1
    assert "(no header)" in result.output


def test_policy_test_needs_the_named_rule_not_just_any_denial(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("# expect: deny network\nimport os\n")
    (case,) = run_corpus(load_policy("default"), tmp_path)
    assert not case.ok and case.got == "deny" and "not by network" in case.note


def test_policy_test_only_reads_files_directly_in_the_folder(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "bad.py").write_text("x = 1\n")
    (tmp_path / "ok.py").write_text("# expect: allow\nx = 1\n")
    assert [c.file for c in run_corpus(load_policy("default"), tmp_path)] == ["ok.py"]
