"""Taint by time: the judge's mark (sandbox.judge.taint) and the candidate-facing copy
(grader.grading.redact / withhold) of a report from every stage, with and without a call
on a hidden shape before the failure. After a hidden call no figure a runner's outputs or
times determine is left; before one, every figure stays.

Reports are built as the host builds them from a record (grader.grading.summary); the
end-to-end proof with a real attack is tests/e2e/test_numbers_channel_e2e.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from grader.grading.redact import facts_for, redact
from grader.report.model import (
    AcceptanceResult,
    BadElement,
    CorrectnessResult,
    Report,
    ReportError,
    RuleOutcome,
    SandboxInfo,
    Taint,
    TimingStats,
)
from grader.report.withhold import REASON
from grader.task import load_task
from sandbox.contract import wire
from sandbox.judge.taint import Taint as JudgeTaint

ROOT = Path(__file__).resolve().parents[2]
SPEC, _ = load_task(ROOT / "examples" / "vector_add_small")  # hidden 37x999, 1x1000, 67x1031
FACTS = facts_for(SPEC)
TUNE, HIDDEN = {"M": 64, "N": 1024}, {"M": 37, "N": 999}
STAGES = ("compile", "correctness", "benchmark", "accept", "integrity")
# Figures a candidate chooses: odd digits no judge setting has, so a copy holding one is seen.
CHOSEN = (1033.123456, 0.0152435302, 527871.25, 4.56789123, 3.14159265, 2.71828182)


# ---- the judge's mark -------------------------------------------------------------------
def _judge_run(fail_at: str | None) -> tuple[wire.TaintRecord, list[wire.ErrorWire]]:
    """The calls of an evaluation in the judge's order, stopping with an error at
    ``fail_at`` (a phase name), as sandbox.judge.run stamps it."""
    phases: dict[str, float] = {"judge_ready": 0.5}
    t = JudgeTaint([TUNE], phases)
    err = wire.ErrorWire(stage="correctness", code="wrong_values", message="m", origin="candidate",
                         after_hidden=False)
    steps: list[tuple[str, wire.ErrorStage, dict[str, Any]]] = [
        ("compile", "compile", {"dims": TUNE, "phase": "compile"}),
        ("tune", "correctness", {"dims": TUNE, "shape_kind": "tune", "phase": "correctness"}),
        ("hidden", "correctness", {"dims": HIDDEN, "shape_kind": "hidden", "phase": "correctness"}),
        ("benchmark", "benchmark", {"dims": TUNE, "phase": "benchmark"}),
        ("accept", "accept", {"dims": TUNE, "phase": "accept"})]
    for name, stage, where in steps:
        t.call(stage, where)
        phases[name] = 1.0
        if name == fail_at:
            return t.record(False), [t.stamp(err)]
    t.touch("accept")
    return t.record(False), []


def test_the_judge_marks_nothing_before_the_first_hidden_call() -> None:
    for fail_at in ("compile", "tune"):
        rec, (err,) = _judge_run(fail_at)
        assert rec == wire.TaintRecord() and err.after_hidden is False


def test_the_judge_marks_from_the_first_hidden_call_on_by_time_not_by_shape() -> None:
    rec, (err,) = _judge_run("hidden")
    assert rec.hidden_phase == "correctness" and rec.sections == ("correctness",)
    assert err.after_hidden is True and rec.phases == ("hidden",)
    rec, (err,) = _judge_run("benchmark")  # a failure on the public timed shape
    assert err.after_hidden is True and rec.sections == ("correctness", "timing")
    assert set(rec.phases) == {"hidden", "benchmark"}
    rec, errs = _judge_run(None)
    assert errs == [] and rec.sections == ("correctness", "timing", "acceptance")
    assert "judge_ready" not in rec.phases and "tune" not in rec.phases


def test_dims_not_known_public_start_the_mark_fail_closed() -> None:
    t = JudgeTaint([TUNE], {})
    t.call("correctness", {"dims": {"M": 2, "N": 2}, "phase": "racecheck"})  # no kind given
    assert t.record(True).hidden_phase == "racecheck" and "diagnostics" in t.record(True).sections
    t = JudgeTaint([TUNE], {})
    t.call("correctness", {"dims": TUNE, "shape_kind": "hidden", "phase": "correctness"})
    assert t.started  # a hidden shape equal to a tune one is still a hidden call


def test_an_unstamped_error_is_after_the_mark_and_the_wire_round_trips() -> None:
    assert wire.ErrorWire(stage="benchmark", code="timeout", message="", origin="candidate").after_hidden
    rec = wire.Record(wire_version=wire.WIRE_VERSION, stage="benchmark", errors=(), warnings=(),
                      device="cpu", environment={},
                      taint=wire.TaintRecord("correctness", ("correctness", "timing"), ("benchmark",)))
    assert wire.record_from_json(wire.dumps(rec)) == rec
    raw = json.loads(wire.dumps(rec))
    raw["taint"]["sections"] = ["correctness", "speed"]
    with pytest.raises(wire.WireFormatError):
        wire.record_from_json(json.dumps(raw))


# ---- the candidate's copy of a report from every stage ------------------------------------
def _timing() -> TimingStats:
    return TimingStats(samples=5, mean_ms=CHOSEN[3], median_ms=CHOSEN[4], p95_ms=CHOSEN[5],
                       std_ms=CHOSEN[1], min_ms=CHOSEN[1], cv=CHOSEN[1], bandwidth_gbps=CHOSEN[0],
                       tflops=CHOSEN[2], device="cpu", clock="perf_counter", mode="perf_counter",
                       cache="cold", dims=TUNE, device_state=[{"sm_clock": CHOSEN[0]}],
                       escape={"hidden_ms": CHOSEN[2], "budget_ms": 1.0},
                       clocks={"samples_ms": list(CHOSEN), "judge_ms": list(CHOSEN)})


def _acceptance() -> AcceptanceResult:
    nums = {"median_r": CHOSEN[1], "median_current_ms": CHOSEN[3], "median_candidate_ms": CHOSEN[4],
            "min_improvement_fraction": 0.01, "t_cand": list(CHOSEN)}
    return AcceptanceResult(accepted=False, rule="seed", improvement_fraction=CHOSEN[1], pairs=10,
                            positive_fraction=0.6, reason=f"median r {CHOSEN[1]} < 0.01",
                            rules=[RuleOutcome(rule="seed", accepted=False,
                                               reason=f"median r {CHOSEN[1]}", numbers=nums)],
                            replicate_speedup=CHOSEN[5], unmeasured={"x": f"r {CHOSEN[0]}"})


def _stage_report(stage: str, hidden_before: bool) -> Report:
    """An operator's report that ended with a failure in ``stage`` (the candidate's wrong
    values, or for integrity a planted file), every section it reached filled with figures
    the candidate chose; ``hidden_before``: a hidden-shape call came before the failure."""
    order = ("compile", "correctness", "benchmark", "accept")
    reached = order[:order.index(stage) + 1] if stage in order else order
    dims = TUNE if stage != "correctness" or not hidden_before else HIDDEN
    kind = "tune" if dims == TUNE and stage in ("compile", "correctness") else None
    bad = BadElement(tensor="out", index=[0, 37], expected=CHOSEN[3], actual=CHOSEN[0], dims=dims,
                     seed=17, shape_kind=kind or ("hidden" if dims == HIDDEN else None), phase=stage)
    err = ReportError(stage=stage, code="wrong_values" if stage != "integrity" else "out_tampered",
                      origin="candidate", message=f"wrong at flat index 5: got {CHOSEN[0]}",
                      detail={"first_bad": bad.model_dump(), "dims": dims,
                              **({"shape_kind": kind} if kind else {})},
                      after_hidden=hidden_before)
    sections: list[Any] = []
    if hidden_before:
        sections = ["correctness"] + [s for s, st in (("timing", "benchmark"), ("acceptance", "accept"))
                                      if st in reached]
    phases = {"scan": 0.1, "sandbox_setup": 0.2, "judge_ready": 0.3, "compile": 0.4,
              **({"correctness": CHOSEN[2], "benchmark": CHOSEN[3]} if hidden_before else {}),
              "teardown": CHOSEN[4], "total": CHOSEN[5]}
    sb = SandboxInfo.model_validate({"backend": "bwrap", "limits": {}, "wall_s": CHOSEN[5],
                                     "phases": phases})
    late = [p for p in ("correctness", "benchmark") if p in phases]
    return Report(
        ok=False, stage=stage, task="vector_add_small", errors=[err], sandbox=sb,
        taint=Taint(hidden_phase="correctness" if hidden_before else None, sections=sections,
                    phases=late if hidden_before else []),
        correctness=CorrectnessResult(passed=False, checks=3, shapes_checked=[TUNE], seeds=2,
                                      max_abs_error=CHOSEN[0], max_rel_error=CHOSEN[2],
                                      mismatch_fraction=CHOSEN[1], first_bad=bad)
        if stage != "compile" else None,
        timing=_timing() if "benchmark" in reached and stage != "benchmark" else None,
        timing_current=_timing() if "accept" in reached else None,
        acceptance=_acceptance() if "accept" in reached else None)


def _chosen_left(report: Report) -> list[str]:
    """Every figure of ``CHOSEN`` (at any precision beyond three significant digits) and
    the chosen index still in ``report``."""
    text = report.model_dump_json(exclude={"created_at"})
    hits = [m.group() for x in CHOSEN for m in re.finditer(re.escape(f"{x:.6g}"), text)]
    return hits + (["[0,37]"] if "[0,37]" in text.replace(" ", "") else [])


@pytest.mark.parametrize("stage", STAGES)
def test_after_a_hidden_call_no_output_determined_figure_is_left(stage: str) -> None:
    full = _stage_report(stage, hidden_before=True)
    assert _chosen_left(full)  # the operator's report has them
    out = redact(full, FACTS)
    assert _chosen_left(out) == [], stage
    c = out.correctness
    if c is not None:
        assert (c.max_abs_error, c.max_rel_error, c.mismatch_fraction) == (None, None, None)
        assert c.first_bad is not None and (c.first_bad.index, c.first_bad.actual) == ([], None)
    (e,) = out.errors
    assert e.detail.get("withheld") is True and e.stage == stage and e.line is None
    for t in (out.timing, out.timing_current):
        if t is not None:
            assert (t.mean_ms, t.p95_ms, t.std_ms, t.min_ms, t.cv) == (None,) * 5
            # of the per-call figures only the median's interval stays, as coarse as it
            assert set(t.clocks) <= {"median_ci_ms"} and t.escape == {} and t.device_state == []
            assert all(float(f"{b:.3g}") == b for b in t.clocks.get("median_ci_ms", []))
            assert t.median_ms == float(f"{CHOSEN[4]:.3g}") and t.unmeasured["mean_ms"] == REASON
    a = out.acceptance
    if a is not None:
        assert a.accepted is False and a.pairs == 10 and a.positive_fraction == 0.6
        assert a.improvement_fraction == float(f"{CHOSEN[1]:.3g}")
        assert set(a.rules[0].numbers) == {"median_current_ms", "median_candidate_ms",
                                           "min_improvement_fraction"}
    assert out.sandbox is not None and out.sandbox.wall_s is None
    assert set(out.sandbox.phases) <= {"scan", "sandbox_setup", "judge_ready", "compile"}
    assert out.withheld and all("hidden shapes" in why for why in out.withheld.values())
    assert redact(out, FACTS) == out  # idempotent: a stored copy redacted again


@pytest.mark.parametrize("stage", ["compile", "correctness"])
def test_before_any_hidden_call_every_figure_stays(stage: str) -> None:
    full = _stage_report(stage, hidden_before=False)
    out = redact(full, FACTS)
    assert out.correctness == full.correctness and out.withheld == {}
    (e,) = out.errors
    assert e.message == full.errors[0].message and e.detail["first_bad"]["index"] == [0, 37]
    assert out.sandbox is not None and out.sandbox.phases == full.sandbox.phases  # type: ignore[union-attr]


def test_a_mark_saying_no_hidden_call_keeps_timing_and_pairs() -> None:
    full = _stage_report("accept", hidden_before=False)
    out = redact(full, FACTS)
    assert out.timing_current == full.timing_current and out.acceptance == full.acceptance


def test_a_report_without_the_judges_mark_is_withheld_everywhere_fail_closed() -> None:
    full = _stage_report("accept", hidden_before=False).model_copy(update={"taint": None})
    full.errors[0].after_hidden = None  # an older report, or the host's own error
    out = redact(full, FACTS)
    assert _chosen_left(out) == []
    no_hidden = facts_for({**json.loads(SPEC.model_dump_json()),
                           "shapes": {"tune": [TUNE], "hidden": []}})
    assert redact(full, no_hidden).correctness == full.correctness  # nothing secret to carry
