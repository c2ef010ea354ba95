"""Candidate text is data: the sanitiser, the judge's points of entry, the host's reader and
the human rendering (tests/attacks/runtime/*_message.py are the end-to-end attacks)."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from grader.backends.base import SandboxOutcome
from grader.grading.summary import build_report
from grader.report.model import Report, ReportError
from grader.report.record import read_result
from grader.report.render import render_report
from grader.task import load_task
from sandbox.contract import codes, text, wire
from sandbox.contract.failure import StageFailure
from sandbox.launcher.proc import _malformed, _runner_error

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ("lone \ud800 \udfff surrogates, \x1b[2J\x1b[1;32mANSI\x1b[0m, \rCR, NUL\x00, BS\x08, "
           "DEL\x7f, C1 CSI\x9b31m, bidi \u202eevil\u202c \u2066iso\u2069, LS\u2028PS\u2029, BOM\ufeff")
UNSAFE = ["\ud800", "\udfff", "\x1b", "\r", "\x00", "\x08", "\x7f", "\x9b", "\u202e", "\u202c",
          "\u2066", "\u2069", "\u2028", "\u2029", "\ufeff"]
FAKE_PASS = "[bold green]PASS[/]  task=vector_add_small  stage=benchmark  device=cpu"


def _safe(s: str) -> bool:
    s.encode("utf-8")  # raises on a lone surrogate
    return not any(c in s for c in UNSAFE)


# ---- sandbox.contract.text ---------------------------------------------------------------------
def test_clean_replaces_surrogates_and_makes_controls_visible() -> None:
    out = text.clean(HOSTILE)
    assert _safe(out)
    assert "\ufffd \ufffd surrogates" in out and "\\x1b[2J" in out and "\\x0dCR" in out
    assert "\\x00" in out and "\\x9b" in out and "\\u202e" in out and "\\ufeff" in out


def test_clean_keeps_newlines_and_tabs_in_messages_only_when_asked() -> None:
    assert text.clean("a\n\tb") == "a\n\tb"
    assert text.clean("a\n\tb", lines=False) == "a\\n\\tb"


def test_clean_caps_length_and_says_how_much_was_cut() -> None:
    out = text.clean("x" * 10_000, 100)
    assert len(out) == 100 and out.endswith("[9900 more characters cut]")
    escaped = text.clean("\x1b" * 1000, 100)  # each escape is four characters
    assert len(escaped) <= 100 and "\x1b" not in escaped and "more characters cut" in escaped


def test_clean_is_idempotent_and_leaves_ordinary_text_alone() -> None:
    ordinary = "ValueError: shape (3, 4) != [3, 5] — ünïcode ok, emoji \U0001f600, tab\tend"
    assert text.clean(ordinary) == ordinary
    once = text.clean(HOSTILE)
    assert text.clean(once) == once


def test_clean_never_runs_a_str_subclass_method_nor_fails_on_an_unprintable_object() -> None:
    class Sly(str):
        def __str__(self) -> str:
            raise RuntimeError("ran")

    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert text.clean(Sly("plain")) == "plain" and type(text.clean(Sly("plain"))) is str
    assert text.clean(Unprintable()) == "<unprintable Unprintable>"


@pytest.mark.parametrize("code,want", [("wrong_values", "wrong_values"), ("a.b-c_1", "a.b-c_1"),
                                       ("Wrong", "exception"), ("has space", "exception"),
                                       ("x" * 65, "exception"), ("\ud800", "exception"),
                                       (7, "exception"), ("", "exception"), ("ok\n", "exception")])
def test_clean_code_admits_only_catalogue_shaped_codes(code: object, want: str) -> None:
    assert text.clean_code(code) == want


def test_clean_tree_makes_a_detail_json_safe_with_bounds() -> None:
    deep: object = "leaf"
    for _ in range(20):
        deep = [deep]
    detail = {"msg\x1b": HOSTILE, "nan": float("nan"), "inf": float("-inf"), "big": 10 ** 5000,
              "tuple": (1, 2.5, None, True), "many": list(range(1000)), 3: "int key",
              "deep": deep, "obj": object()}
    out = text.clean_tree(detail)
    dumped = json.dumps(out, allow_nan=False)  # raises on NaN, inf or a 5000-digit integer
    dumped.encode("utf-8")
    assert _safe(json.loads(dumped)["msg\\x1b"])
    assert out["nan"] == "nan" and out["inf"] == "-inf" and out["big"] == "<integer out of range>"
    assert out["tuple"] == [1, 2.5, None, True] and len(out["many"]) == text.ITEMS_CAP
    assert out["3"] == "int key" and "<nested too deep>" in dumped


def test_clean_strings_cleans_every_string_of_a_record_but_cuts_nothing() -> None:
    raw = {"errors": [{"message": "a\ud800" + "y" * 9000, "k\x1b": ["\x9b"]}], "n": [1.5] * 500}
    out = text.clean_strings(raw)
    assert out["errors"][0]["message"] == "a\ufffd" + "y" * 9000
    assert out["errors"][0]["k\\x1b"] == ["\\x9b"] and out["n"] == raw["n"]


# ---- the judge's points of entry -------------------------------------------------------
def test_runner_error_reply_is_data_and_its_code_is_one_the_record_allows() -> None:
    f = _runner_error({"code": "Wrong Values!\ud800", "message": HOSTILE + "m" * 5000,
                       "type": "[bold]T\x1b" * 100, "line": "12"})
    assert f.code == "exception" and f.line is None
    assert _safe(f.message) and len(f.message) <= 2000
    assert f.detail is not None and _safe(f.detail["type"]) and len(f.detail["type"]) <= text.NAME_CAP
    assert f.detail["runner_code"] == "Wrong Values!\ufffd"
    assert _runner_error({"code": "import", "message": "m", "type": "E", "line": 3}).line == 3
    assert _runner_error({"code": "import", "line": True}).line is None
    assert _runner_error("not a dict").code == "protocol_violation"


@pytest.mark.parametrize("reply", [{"ok": True, "threads": "many"}, {"ok": True, "threads": True},
                                   {"ok": True, "threads": 1.5}, {"ok": True, "streams": [1]},
                                   {"ok": True, "flush_bytes": 1 << 70},
                                   {"ok": True, "audit": "none"},
                                   {"ok": True, "audit": {"compute_ops": 5}},
                                   {"ok": True, "audit": {"ops": {"a": 1}}}])
def test_malformed_runner_reply_is_named_before_the_judge_converts_it(reply: dict[str, object]) -> None:
    assert _malformed(reply) is not None


def test_well_formed_runner_replies_pass() -> None:
    assert _malformed({"ok": True}) is None
    assert _malformed({"ok": True, "threads": 3, "streams": 0, "flush_bytes": 1 << 27, "ms": "x",
                       "audit": {"ops": ["aten::empty"], "compute_ops": []}}) is None


def test_stage_failure_cleans_message_and_detail_where_they_enter_the_record() -> None:
    e = StageFailure("correctness", "exception", HOSTILE * 200,
                     detail={"x\ud800": float("nan"), "kernel": "k\x1b[31m"}).error
    assert e.code == "exception" and len(e.message) <= text.MESSAGE_CAP and _safe(e.message)
    assert e.detail == {"x\ufffd": "nan", "kernel": "k\\x1b[31m"}
    rec = wire.Record(wire_version=wire.WIRE_VERSION, stage="correctness", errors=(e,),
                      warnings=(), device="cpu", environment={})
    wire.dumps(rec).encode("ascii")  # the judge's own strict dump (allow_nan=False)
    with pytest.raises(codes.UnknownCode):  # a code is a catalogue name, never free text
        StageFailure("correctness", "Not A Code", "m")
    renamed = StageFailure("compile", "runner_spawned_process", "m").renamed("current_").error
    assert renamed.code == "current_runner_spawned_process"


# ---- the host: record reader, report, rendering ----------------------------------------
def _signed(tmp_path: Path, rec: wire.Record, key: bytes) -> Path:
    body = wire.dumps(rec)
    p = tmp_path / "result.json"
    p.write_text(json.dumps({"payload": body,
                             "mac": hmac.new(key, body.encode(), hashlib.sha256).hexdigest()}))
    return p


def test_host_reads_a_record_with_text_pydantic_refuses_and_builds_the_report(tmp_path: Path) -> None:
    """A judge path that missed the cleaning (an ErrorWire made directly, a warning, a
    tool's echo) still cannot make pydantic refuse the record: the host cleans it too."""
    key = b"k" * 32
    err = wire.ErrorWire(stage="compile", code="exception", origin="candidate",
                         message="RuntimeError: " + HOSTILE + "z" * 6000,
                         detail={"type": "E\ud800", "names": ["\x1b[31m"]})
    rec = wire.Record(wire_version=wire.WIRE_VERSION, stage="compile", errors=(err,),
                      warnings=("tool said \ud800\x1b[2J",), device="cpu", environment={})
    got = read_result(_signed(tmp_path, rec, key), key, 1 << 20)
    spec, _ = load_task(ROOT / "examples" / "vector_add_small")
    report = build_report(Report(ok=False, stage="compile", task=spec.name), spec, got,
                          SandboxOutcome(backend="bwrap", exit_code=0, signal=None, wall_s=1.0))
    again = Report.model_validate_json(report.model_dump_json())  # round-trips strictly
    e = again.errors[0]
    assert (e.origin, e.code) == ("candidate", "exception") and not again.ok
    assert _safe(e.message) and len(e.message) <= 4000 and e.message.endswith("characters cut]")
    assert _safe(again.warnings[0]) and e.detail == {"type": "E\ufffd", "names": ["\\x1b[31m"]}


def _render(report: Report, width: int = 80) -> str:
    buf = io.StringIO()
    render_report(report, Console(file=buf, width=width, color_system=None))
    return buf.getvalue()


def _failing(message: str, **kw: object) -> Report:
    return Report(ok=False, stage="compile", task="vector_add_small",
                  errors=[ReportError(stage="compile", code="exception", origin="candidate",
                                      message=message)], **kw)


def _at_margin(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln and not ln[0].isspace()]


def test_balanced_markup_in_a_message_is_printed_literally_under_one_verdict_line() -> None:
    out = _render(_failing(f"RuntimeError: {FAKE_PASS}\n{FAKE_PASS}",
                           warnings=[f"[green]{FAKE_PASS}[/green]"]))
    assert out.count("[bold green]PASS[/]") == 3 and "[green][bold green]PASS[/]" in out
    assert _at_margin(out) == [_at_margin(out)[0]] and _at_margin(out)[0].startswith("FAIL ")
    verdicts = [ln for ln in out.splitlines() if ln.lstrip().startswith(("PASS", "FAIL"))]
    assert verdicts == [_at_margin(out)[0]]  # any PASS text is indented inside the message


def test_unbalanced_markup_and_a_trailing_backslash_do_not_break_rendering() -> None:
    out = _render(_failing("done [/] [/bold] [link=file:///etc/passwd]x[/link] \\"))
    assert "done [/] [/bold] [link=file:///etc/passwd]x[/link] \\" in out


def test_a_message_wrapped_at_the_console_width_cannot_start_a_verdict_line() -> None:
    for pad in range(60, 90):  # wherever the wrap falls, "PASS" never reaches the margin
        out = _render(_failing("x" * pad + " PASS  task=vector_add_small  stage=benchmark"))
        assert len(_at_margin(out)) == 1, out


def test_control_characters_in_a_report_never_reach_the_terminal() -> None:
    report = _failing("plain")
    report.errors[0].message = HOSTILE.replace("\ud800", "").replace("\udfff", "")
    report.warnings = ["\x1b]0;title\x07 \x1b[1A\r"]
    out = _render(report)
    assert not any(c in out for c in UNSAFE) and "\\x1b[2J" in out and "\\x1b]0;title\\x07" in out


def test_profile_rendering_prints_kernel_names_and_advice_literally() -> None:
    """`kgrader profile` shows what ncu echoed of the candidate: its kernel names."""
    from types import SimpleNamespace

    from grader.cli.diagnostics import _render as render_profile
    from grader.report.diagnostics_model import Diagnostics, KernelCounters, KernelDiagnostics

    name = "[bold green]PASS[/]\x1b[2J_kernel"
    diag = Diagnostics(tool="ncu", kernels=[KernelDiagnostics(name=name, launches=1,
                                                              counters=KernelCounters())],
                       advice=[f"{name}: [/] spills"], notes=["[red]n[/]"])
    result = SimpleNamespace(diagnostics=diag, ok=False, task="t", device="cuda",
                             errors=[ReportError(stage="compile", code="exception",
                                                 origin="candidate", message="[/]")],
                             warnings=["[/]"])
    buf = io.StringIO()
    render_profile(result, Console(file=buf, width=200, color_system=None))
    out = buf.getvalue()
    assert "[bold green]PASS[/]\\x1b[2J_ker" in out and "\x1b" not in out
    assert ": [/] spills" in out and "[red]n[/]" in out
    assert _at_margin(out)[0].startswith("profile FAILED")


def test_scan_output_shows_the_candidates_source_line_without_its_escapes(tmp_path: Path) -> None:
    import click
    from click.testing import CliRunner

    from grader.cli.scan import register

    cand = tmp_path / "esc.py"
    cand.write_text('import os  # \x1b[2J\x1b[1;32mALLOWED\x1b[0m \u202e\nos.system("x")\n')
    group = click.Group("kgrader")
    register(group)
    result = CliRunner().invoke(group, ["scan", str(cand)])
    assert result.exit_code == 1 and "DENIED" in result.output, result.output
    assert "\x1b" not in result.output and "\u202e" not in result.output
    assert "# \\x1b[2J\\x1b[1;32mALLOWED\\x1b[0m \\u202e" in result.output
