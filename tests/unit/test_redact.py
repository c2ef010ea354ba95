"""grader.grading.redact: the candidate-facing copy of a report holds no hidden shape.

Reports are built by hand (pure data); the end-to-end proof through the agent tool, the
experience store and a leaderboard page is tests/e2e/test_hidden_shapes_e2e.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from grader.grading.redact import HIDDEN_KEY, ShapeFacts, facts_for, redact, scrub_text
from grader.leaderboard.render import public_row
from grader.leaderboard.state import EvalRow
from grader.report.diagnostics_model import Diagnostics, SanitizerFinding, SanitizerResult
from grader.report.model import (
    AcceptanceResult,
    BadElement,
    CorrectnessResult,
    Report,
    ReportError,
    SandboxInfo,
    ShapeSets,
)
from grader.task import load_task

ROOT = Path(__file__).resolve().parents[2]
SPEC, _ = load_task(ROOT / "examples" / "vector_add_small")  # hidden 37x999, 1x1000, 67x1031
FACTS = facts_for(SPEC)
SECRET = re.compile(r"(?<![\w.])(37|999|1000|67|1031)(?![\w.])")


def _leaks(obj: object) -> list[str]:
    if not isinstance(obj, str) and isinstance(obj, dict):
        obj = {k: v for k, v in obj.items() if k != "created_at"}  # "...T11:37:44": the clock
    return SECRET.findall(obj if isinstance(obj, str) else json.dumps(obj))


def _report(*errors: ReportError, **kw: object) -> Report:
    fields: dict[str, object] = {"stage": "correctness",
                                 "sandbox": SandboxInfo.model_validate({"backend": "bwrap", "limits": {}})}
    return Report(ok=False, task="vector_add_small", errors=list(errors), **{**fields, **kw})


def _raised(kind: str | None, dims: dict[str, int], text: str) -> ReportError:
    where = {"dims": dims, "seed": 17, "phase": "correctness"}
    if kind is not None:
        where["shape_kind"] = kind
    return ReportError(stage="correctness", code="exception", origin="candidate", line=12,
                       message=text, detail={"type": "RuntimeError", **where})


def test_a_raise_on_a_hidden_shape_is_hidden_shape_k_with_its_text_withheld() -> None:
    full = _report(_raised("hidden", {"M": 37, "N": 999}, "RuntimeError: saw torch.Size([37, 999])"))
    out = redact(full, FACTS)
    (e,) = out.errors
    assert e.code == "exception" and e.stage == "correctness" and e.origin == "candidate"
    assert "hidden shape #0" in e.message and e.line is None
    assert e.detail == {"withheld": True, HIDDEN_KEY: 0}
    assert _leaks(out.model_dump(mode="json")) == []
    assert "37, 999" in full.errors[0].message  # the operator's report is not changed


def test_a_failure_not_marked_as_tune_is_withheld_fail_closed() -> None:
    err = ReportError(stage="correctness", code="exception", origin="candidate",
                      message="RuntimeError: shape (67, 1031) not supported", detail={"type": "X"})
    for e in (err, err.model_copy(update={"stage": "benchmark"}),
              err.model_copy(update={"stage": "integrity", "code": "judge_died"})):
        (out,) = redact(_report(e), FACTS).errors
        assert "withheld" in out.message and _leaks(out.message) == []


def test_tune_shape_and_compile_failures_keep_their_text() -> None:
    tune = _raised("tune", {"M": 64, "N": 1024}, "RuntimeError: saw torch.Size([64, 1024])")
    comp = ReportError(stage="compile", code="import", origin="candidate", line=3,
                       message="ZeroDivisionError: division by zero")
    out = redact(_report(tune, comp), FACTS)
    assert [e.message for e in out.errors] == [tune.message, comp.message]
    assert out.errors[0].line == 12 and out.errors[0].detail["dims"] == {"M": 64, "N": 1024}


def test_a_code_the_runner_chose_is_kept_only_from_the_runner_vocabulary() -> None:
    forged = _raised("hidden", {"M": 1, "N": 1000}, "x").model_copy(update={"code": "n-one-thousand"})
    judge = ReportError(stage="correctness", code="input_mutated", origin="candidate", message="x",
                        detail={"dims": {"M": 1, "N": 1000}, "shape_kind": "hidden"})
    out = redact(_report(forged, judge), FACTS)
    assert [e.code for e in out.errors] == ["exception", "input_mutated"]
    assert [e.detail.get(HIDDEN_KEY) for e in out.errors] == [1, 1]


def test_first_bad_on_a_hidden_shape_keeps_only_tensor_and_phase() -> None:
    bad = BadElement(tensor="out", index=[36, 998], expected=1.5, actual=37.0,
                     dims={"M": 37, "N": 999}, seed=17, shape_kind="hidden")
    err = ReportError(stage="correctness", code="wrong_values", origin="candidate",
                      message="output 'out' wrong at index [36, 998] for dims {'M': 37, 'N': 999}: "
                              "expected 1.5, got 37.0", detail={"first_bad": bad.model_dump()})
    c = CorrectnessResult(passed=False, checks=5, max_abs_error=35.5, mismatch_fraction=0.001,
                          shapes_checked=[{"M": 64, "N": 1024}, {"M": 37, "N": 999}], first_bad=bad)
    out = redact(_report(err, correctness=c), FACTS)
    fb = out.correctness.first_bad if out.correctness else None
    assert fb is not None and fb.dims == {HIDDEN_KEY: 0} and fb.index == [] and fb.actual is None
    assert out.correctness is not None and out.correctness.max_abs_error is None
    assert out.correctness.shapes_checked == [{"M": 64, "N": 1024}, {HIDDEN_KEY: 0}]
    assert _leaks(out.model_dump(mode="json")) == []


def test_judge_text_names_hidden_shape_k_and_hidden_values_are_scrubbed() -> None:
    assert scrub_text("checked dims {'M': 67, 'N': 1031} ok", FACTS) == "checked dims hidden shape #2 ok"
    assert scrub_text('{"M": 1, "N": 1000}', FACTS) == "hidden shape #1"
    assert scrub_text("grid (37, 1, 1) at 0x999a, line 999", FACTS) == \
        "grid (<hidden>, 1, 1) at 0x999a, line <hidden>"
    assert scrub_text("tune {'M': 64, 'N': 1024} and 64 x 1024", FACTS) == \
        "tune {'M': 64, 'N': 1024} and 64 x 1024"


def test_generated_shape_sets_and_outputs_are_withheld_after_the_compile_stage() -> None:
    drawn = ShapeSets(seed="leaderboard", tune=[{"M": 64, "N": 1024}], hidden=[{"M": 5, "N": 777}],
                      hidden_probes=["larger"], timed={"M": 64, "N": 1024})
    late = _report(_raised("hidden", {"M": 5, "N": 777}, "saw 777"), shapes=drawn,
                   sandbox=SandboxInfo.model_validate({"backend": "bwrap", "limits": {},
                                                       "stdout_tail": "M=5 N=777"}))
    out = redact(late, facts_for(SPEC, late))
    assert out.shapes is not None and out.shapes.hidden == [{HIDDEN_KEY: 3}]  # after the 3 fixed
    assert out.shapes.timed == {"M": 64, "N": 1024} and out.errors[0].detail[HIDDEN_KEY] == 3
    assert out.sandbox is not None and "777" not in out.sandbox.stdout_tail
    early = _report(ReportError(stage="compile", code="syntax", origin="candidate", message="bad"),
                    stage="compile", sandbox=SandboxInfo.model_validate(
                        {"backend": "bwrap", "limits": {}, "stderr_tail": "Traceback: bad"}))
    assert redact(early, FACTS).sandbox.stderr_tail == "Traceback: bad"  # type: ignore[union-attr]


def test_copies_of_a_withheld_message_are_replaced_too() -> None:
    err = _raised("hidden", {"M": 37, "N": 999}, "boom " * 200 + "[37, 999]")
    acc = AcceptanceResult(accepted=False, rule="seed", improvement_fraction=None, pairs=0,
                           positive_fraction=None, reason=err.message[:500])
    out = redact(_report(err, acceptance=acc, warnings=[f"note: {err.message[:300]}"]), FACTS)
    assert out.acceptance is not None and "boom" not in out.acceptance.reason
    assert "boom" not in out.warnings[0]
    row = EvalRow(submission="s", task="vector_add_small", file_sha="f", round="main",
                  verdict="disqualified", stage="correctness", code="exception",
                  message=f"integrity violation: {err.message}", speedup=None, speedup_source=None,
                  t_sub_ms=None, report_json=_report(err).model_dump_json(), wall_s=1.0,
                  engine="local", finished_at="now")
    pub = public_row(row, FACTS)
    assert "boom" not in pub.message and _leaks(pub.message) == [] and pub.report_json is not None
    assert "boom" not in pub.report_json and _leaks(json.loads(pub.report_json)) == []


def test_memory_checker_findings_lose_threads_blocks_and_text() -> None:
    f = SanitizerFinding(kind="out_of_bounds", space="global", access="write", size=4, kernel="k",
                         thread=[36, 0, 0], block=[998, 0, 0], address="0x1", text="at 37x999")
    diag = Diagnostics(sanitizer=SanitizerResult(tool="memcheck", ran=True, findings=[f]))
    out = redact(_report(diagnostics=diag), FACTS)
    (g,) = out.diagnostics.sanitizer.findings  # type: ignore[union-attr]
    assert (g.kind, g.space, g.access) == ("out_of_bounds", "global", "write")
    assert g.thread is None and g.block is None and "37" not in g.text


def test_unknown_hidden_shapes_treat_every_shape_not_known_public_as_hidden() -> None:
    unknown = ShapeFacts(None, ({"M": 64, "N": 1024},))
    bad = BadElement(tensor="out", index=[0], expected=0.0, actual=1.0, dims={"M": 3, "N": 5},
                     seed=1, shape_kind="hidden")
    c = CorrectnessResult(passed=False, checks=1, first_bad=bad,
                          shapes_checked=[{"M": 64, "N": 1024}, {"M": 3, "N": 5}])
    out = redact(_report(correctness=c), unknown)
    assert out.correctness is not None and out.correctness.shapes_checked[1] == {HIDDEN_KEY: -1}
    assert out.correctness.first_bad is not None and out.correctness.first_bad.dims == {HIDDEN_KEY: -1}
    assert ShapeFacts.from_json({"hidden": "junk"}).hidden is None


def test_redaction_is_idempotent_and_facts_round_trip_as_json() -> None:
    full = _report(_raised("hidden", {"M": 37, "N": 999}, "saw [37, 999]"))
    once = redact(full, FACTS)
    assert redact(once, FACTS) == once
    assert ShapeFacts.from_json(json.loads(json.dumps(FACTS.to_json()))) == FACTS
