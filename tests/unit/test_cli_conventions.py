"""The CLI's conventions (docs/cli.md): --json on every command, one error document,
exit codes, logging options, shell completion, progress lines, wide piped tables."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import structlog
from click.testing import CliRunner
from rich.console import Console

from grader.cli.app import main
from grader.cli.board_progress import BoardLines
from grader.cli.progress import StepLines, judge_steps, tell_judge_steps, wide_console
from grader.cli.tools import tool_exit_code
from grader.logs import configure, on_step, step
from grader.report.model import Report
from grader.report.render import render_report

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "examples" / "vector_add_small"


def _commands(cmd: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command]]:
    if isinstance(cmd, click.Group):  # through click's API: the top group loads lazily
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None, f"{' '.join((*path, name))} is listed but not found"
            yield from _commands(sub, (*path, name))
    else:
        yield " ".join(path), cmd


def _kgrader(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "grader.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env={**os.environ, **(env or {})})


def test_every_command_of_the_tree_takes_json() -> None:
    commands = dict(_commands(main))
    assert {"run", "scan", "policy show", "leaderboard run", "records show", "tool",
            "image build", "experience query"} <= set(commands)
    lacking = [name for name, cmd in commands.items()
               if not any(isinstance(p, click.Option) and "--json" in p.opts for p in cmd.params)]
    assert lacking == [], f"commands without --json: {lacking}"
    # the error document finds the flag by this name (grader.cli.common.json_requested)
    named = [name for name, cmd in commands.items()
             if not any(isinstance(p, click.Option) and "--json" in p.opts and p.name == "as_json"
                        for p in cmd.params)]
    assert named == [], f"--json not stored as as_json: {named}"


def test_root_has_documented_log_options() -> None:
    opts = {o for p in main.params for o in p.opts}
    assert {"--log-level", "--log-format"} <= opts
    doc = (ROOT / "docs" / "cli.md").read_text()
    for needle in ("--log-level", "--log-format", "_KGRADER_COMPLETE", "| 2 |", "| 130 |"):
        assert needle in doc


def test_a_usage_error_under_json_is_one_error_document_and_exit_2() -> None:
    result = CliRunner().invoke(main, ["policy", "show", "no-such-policy", "--json"])
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 2
    assert doc["error"]["code"] == "bad_policy" and doc["error"]["origin"] == "usage"
    assert "no-such-policy" in doc["error"]["message"]
    assert result.stderr.startswith("error: ")


def test_without_json_an_error_leaves_stdout_empty() -> None:
    result = CliRunner().invoke(main, ["policy", "show", "no-such-policy"])
    assert result.exit_code == 2 and result.stdout == "" and result.stderr.startswith("error: ")


def test_an_unreadable_candidate_is_origin_candidate_and_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty.py"
    empty.write_bytes(b"")
    result = CliRunner().invoke(main, ["scan", str(empty), "--json"])
    assert result.exit_code == 2
    err = json.loads(result.stdout)["error"]
    assert (err["code"], err["origin"]) == ("bad_candidate_file", "candidate")


def test_click_usage_errors_are_the_same_document_through_the_entry_point() -> None:
    p = _kgrader("scan", "--json", "--no-such-flag", "x.py")
    assert p.returncode == 2 and "No such option" in p.stderr
    doc = json.loads(p.stdout)
    assert doc["error"]["code"] == "usage" and doc["error"]["origin"] == "usage"


@pytest.mark.parametrize(("result", "want"), [
    ({"ok": True, "errors": []}, 0),
    ({"ok": False, "errors": [{"stage": "correctness", "code": "wrong_values",
                               "origin": "candidate"}]}, 1),
    ({"ok": False, "errors": [{"stage": "scan", "code": "bad_candidate_file",
                               "origin": "candidate"}]}, 2),
    ({"ok": False, "errors": [{"stage": "sandbox", "code": "sandbox_unavailable",
                               "origin": "infrastructure"}]}, 2),
    ({"ok": False, "errors": [{"stage": "arguments", "code": "bad_argument",
                               "origin": "usage"}]}, 2),
])
def test_tool_exit_codes_follow_run(result: dict[str, Any], want: int) -> None:
    assert tool_exit_code(result) == want


def test_log_level_and_format_reach_structlog(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        configure("info", "json")
        structlog.get_logger("t").info("probe_event", n=1)
        structlog.get_logger("t").debug("hidden_event")
        err = capsys.readouterr().err.strip().splitlines()
        assert [json.loads(line)["event"] for line in err] == ["probe_event"]
        configure("debug", "console")
        structlog.get_logger("t").debug("shown_event")
        out = capsys.readouterr().err
        assert "shown_event" in out and not out.lstrip().startswith("{")
    finally:
        configure()


def test_root_log_options_configure_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr("grader.cli.app.configure_logs", lambda *a: seen.append(a))
    result = CliRunner().invoke(main, ["--log-level", "debug", "--log-format", "json",
                                       "policy", "list", "--json"])
    assert result.exit_code == 0 and seen == [("debug", "json")]
    assert "default" in [p["name"] for p in json.loads(result.stdout)["policies"]]


@pytest.mark.skipif(shutil.which("kgrader") is None, reason="the kgrader script is not installed")
def test_shell_completion_produces_a_script_and_completes_commands() -> None:
    def kgrader(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kgrader"], capture_output=True, text=True, timeout=120,
                              env={**os.environ, **env})

    for shell in ("bash", "zsh", "fish"):
        script = kgrader(_KGRADER_COMPLETE=f"{shell}_source")
        assert script.returncode == 0 and "_KGRADER_COMPLETE" in script.stdout, shell
    words = kgrader(_KGRADER_COMPLETE="bash_complete", COMP_WORDS="kgrader pol", COMP_CWORD="1")
    assert "plain,policy" in words.stdout.split()
    words = kgrader(_KGRADER_COMPLETE="bash_complete", COMP_WORDS="kgrader policy sh",
                    COMP_CWORD="2")
    assert "plain,show" in words.stdout.split()


def test_steps_are_plain_lines_without_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    lines = StepLines("run", tty=False)
    with on_step(lines.step):
        step("scan", task="t")
        step("sandbox", backend="bwrap", device="cpu", passed_over=None)
    tell_judge_steps(lines, {"judge_ready": 1.5, "compile_inputs": 0.25, "compile_first_call": 0.5,
                             "correctness": 2.0, "benchmark": 3.0, "runner1_load": 9.0})
    got = capsys.readouterr().err.splitlines()
    assert all(line.startswith("kgrader run: +") for line in got)
    assert [line.split("s ", 1)[1] for line in got] == [
        "scan task=t", "sandbox backend=bwrap device=cpu", "judge: judge ready s=1.5",
        "judge: compile s=0.75", "judge: correctness s=2.0", "judge: timing s=3.0"]


def test_a_step_reaches_only_its_own_threads_listener() -> None:
    import threading

    seen: list[str] = []
    with on_step(lambda name, fields: seen.append(name)):
        t = threading.Thread(target=step, args=("elsewhere",))
        t.start()
        t.join()
        step("here")
    step("after")
    assert seen == ["here"]


def test_disabled_steps_say_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    lines = StepLines("run", enabled=False, tty=False)
    lines.step("scan")
    assert capsys.readouterr().err == ""


def test_judge_steps_order_and_compile_sum() -> None:
    assert judge_steps({"benchmark": 1.0, "compile_inputs": 1.0, "compile_first_call": 2.0,
                        "sandbox_setup": 0.5}) == [("sandbox started", 0.5), ("compile", 3.0),
                                                   ("timing", 1.0)]
    # the stage's own figure, when the record has it, is not added to its parts
    assert judge_steps({"compile": 2.5, "compile_inputs": 1.0}) == [("compile", 2.5)]


def test_the_leaderboard_says_a_line_per_evaluation_without_a_terminal(
        capsys: pytest.CaptureFixture[str]) -> None:
    board = BoardLines()
    board.start("main round", 2)
    board.advance("alice", "softmax", "ok")
    board.advance("bob", "softmax", "failed")
    board.stop()
    err = capsys.readouterr().err
    assert "main round: 2 evaluation(s)" in err and "[2/2] bob/softmax: failed" in err


def test_piped_tables_are_not_folded_at_80_columns() -> None:
    assert wide_console().width >= 200  # pytest's stdout is not a terminal


def _report(**kw: Any) -> Report:
    base: dict[str, Any] = {"ok": False, "stage": "correctness", "task": "t", "device": "cpu",
                            "environment": {"triton_interpret": True},
                            "sandbox": {"backend": "bwrap", "limits": {},
                                        "phases": {"judge_ready": 1.0, "runner1_load": 2.0}}}
    return Report.model_validate({**base, **kw})


def test_the_human_report_names_the_triton_interpreter_and_the_backend() -> None:
    buf = io.StringIO()
    render_report(_report(), Console(file=buf, width=200))
    text = buf.getvalue()
    assert "device=cpu (Triton interpreter)  backend=bwrap" in text
    assert "TRITON_INTERPRET=1" in text and "judge_ready 1 s" in text
    assert "runner1_load" not in text
    buf = io.StringIO()
    render_report(_report(environment={}, device="cuda"), Console(file=buf, width=200))
    assert "interpreter" not in buf.getvalue()


@pytest.mark.skipif(shutil.which("script") is None, reason="util-linux script is not installed")
def test_on_a_terminal_the_steps_are_one_live_line_that_goes_away() -> None:
    code = ("import time\nfrom grader.cli.progress import steps\nfrom grader.logs import step\n"
            "with steps('run'):\n    step('scan', task='t'); time.sleep(0.3)\n"
            "    step('sandbox', backend='bwrap'); time.sleep(0.3)\nprint('after')\n")
    p = subprocess.run(["script", "-qc", f"{sys.executable} -c \"{code}\"", "/dev/null"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    out = p.stdout
    assert p.returncode == 0 and "run: sandbox backend=bwrap" in out, out
    assert "kgrader run: +" not in out  # no plain lines on a terminal
    assert "\x1b[2K" in out and out.rstrip().endswith("after")  # redrawn in place, then cleared


@pytest.mark.parametrize("argv", [
    ["leaderboard", "render", "{tmp}/missing.sqlite", "{tmp}/site"],
    ["records", "show", "{tmp}/missing"],
    ["experience", "stats", "--db", "{tmp}/missing.sqlite"],
    ["tool", "bench_kernel", "--workspace", "{tmp}/no-workspace", "--args", "{{oops"],
])
def test_failures_of_other_commands_are_the_same_document(tmp_path: Path, argv: list[str]) -> None:
    result = CliRunner().invoke(main, [a.format(tmp=tmp_path) for a in argv] + ["--json"])
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert set(doc) == {"ok", "error", "exit_code"} and doc["ok"] is False
    assert set(doc["error"]) == {"code", "message", "hint", "origin"}
    assert doc["error"]["origin"] == "usage" and result.stderr.startswith("error: ")


@pytest.mark.parametrize(("flag", "value"), [("--run-s", "-3"), ("--run-s", "9999"),
                                             ("--memory-mib", "0"), ("--cpus", "0"),
                                             ("--gpu-memory-mib", "3")])
def test_a_limit_out_of_the_models_range_is_a_usage_error_naming_its_option(
        flag: str, value: str) -> None:
    """The Limits model's bounds are the options' ranges: exit 2 with the option named, one
    JSON error document with --json (it was an "internal error" with pydantic's text)."""
    good = str(SMALL / "candidates" / "good.py")
    p = subprocess.run([sys.executable, "-m", "grader.cli", "run", str(SMALL), good, flag, value,
                        "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert doc["error"]["code"] == "usage" and flag in doc["error"]["message"], doc
    assert "internal" not in p.stdout + p.stderr and "pydantic" not in p.stdout + p.stderr


def test_limits_refused_by_the_model_elsewhere_are_a_typed_usage_error() -> None:
    from grader.errors import UsageError
    from grader.limits import Limits
    with pytest.raises(UsageError, match=r"run_s: .*greater than 0; memory_mib"):
        Limits().override(run_s=-1, memory_mib=3)
