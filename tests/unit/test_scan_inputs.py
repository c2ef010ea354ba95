"""Bad candidate files become typed errors (exit 2), never tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from grader.cli.scan import register
from grader.errors import CandidateFileError
from grader.report.model import ScanSummary
from grader.scan import load_policy, read_candidate, scan_file

LEGIT = Path(__file__).resolve().parent.parent / "legit" / "vector_add.py"


@pytest.fixture
def cli() -> click.Group:
    group = click.Group("kgrader")
    register(group)
    return group


def test_missing_file_is_a_candidate_file_error(tmp_path: Path) -> None:
    with pytest.raises(CandidateFileError, match="not found"):
        read_candidate(tmp_path / "nope.py")


def test_directory_is_a_candidate_file_error(tmp_path: Path) -> None:
    with pytest.raises(CandidateFileError, match="directory"):
        read_candidate(tmp_path)


@pytest.mark.parametrize("content", [b"", b"   \n\n"])
def test_empty_file_is_a_candidate_file_error(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "e.py").write_bytes(content)
    with pytest.raises(CandidateFileError, match="empty"):
        read_candidate(tmp_path / "e.py")


def test_binary_file_is_a_candidate_file_error(tmp_path: Path) -> None:
    (tmp_path / "b.py").write_bytes(b"import os\x00\x01\x02")
    with pytest.raises(CandidateFileError, match="binary"):
        read_candidate(tmp_path / "b.py")


def test_non_utf8_file_is_a_candidate_file_error(tmp_path: Path) -> None:
    (tmp_path / "l.py").write_bytes("x = 'caf\u00e9'\n".encode("latin-1"))
    with pytest.raises(CandidateFileError, match="not UTF-8"):
        read_candidate(tmp_path / "l.py")


def test_oversized_file_is_a_candidate_file_error(tmp_path: Path) -> None:
    (tmp_path / "big.py").write_bytes(b"x = 1\n" * 200_000)
    with pytest.raises(CandidateFileError, match="larger than"):
        read_candidate(tmp_path / "big.py")
    assert read_candidate(tmp_path / "big.py", max_bytes=2_000_000).startswith("x = 1")


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbfx = 1\n")
    assert read_candidate(tmp_path / "bom.py") == "x = 1\n"


def test_scan_file_labels_findings_with_the_path_and_summarises(tmp_path: Path) -> None:
    path = tmp_path / "c.py"
    path.write_text("import socket\n")
    result = scan_file(path, load_policy("default"))
    assert result.denied and result.policy == "default"
    assert result.findings[0].file == str(path)
    summary = result.summary()
    assert isinstance(summary, ScanSummary) and summary.denied and summary.findings[0].rule == "network"


def test_cli_scan_exits_0_for_an_allowed_file(cli: click.Group) -> None:
    result = CliRunner().invoke(cli, ["scan", "--policy", "strict", str(LEGIT)])
    assert result.exit_code == 0, result.output


def test_cli_scan_exits_1_and_names_rule_and_line_when_denied(cli: click.Group, tmp_path: Path) -> None:
    path = tmp_path / "c.py"
    path.write_text("x = 1\nimport subprocess\n")
    result = CliRunner().invoke(cli, ["scan", str(path)])
    assert result.exit_code == 1
    assert f"{path}:2:0: deny process-spawn" in result.output


def test_cli_scan_json_is_one_parseable_document(cli: click.Group, tmp_path: Path) -> None:
    path = tmp_path / "c.py"
    path.write_text("eval('1')\n")
    result = CliRunner().invoke(cli, ["scan", "--json", str(LEGIT), str(path)])
    assert result.exit_code == 1
    doc = json.loads(result.output)
    assert doc["denied"] is True and [f["denied"] for f in doc["files"]] == [False, True]
    assert doc["files"][1]["findings"][0]["rule"] == "dynamic-code"


@pytest.mark.parametrize("make", [
    lambda p: p / "missing.py",
    lambda p: (p / "bin.py").write_bytes(b"\x00\x00") and p / "bin.py",
    lambda p: (p / "empty.py").write_bytes(b"") or p / "empty.py",
])
def test_cli_scan_bad_input_exits_2_with_one_line_error(cli: click.Group, tmp_path: Path, make) -> None:  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(cli, ["scan", str(make(tmp_path))])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output


def test_cli_scan_bad_policy_exits_2(cli: click.Group, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("nonsense = 1\n")
    result = CliRunner().invoke(cli, ["scan", "--policy", str(bad), str(LEGIT)])
    assert result.exit_code == 2 and result.output.startswith("error: ")


def test_cli_scan_syntax_error_is_a_denial_not_a_usage_error(cli: click.Group, tmp_path: Path) -> None:
    path = tmp_path / "s.py"
    path.write_text("def f(:\n")
    result = CliRunner().invoke(cli, ["scan", str(path)])
    assert result.exit_code == 1 and "syntax-error" in result.output
