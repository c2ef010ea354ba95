"""grader/experience/lessons.py: the one-line lesson each kind of record gets."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from grader.experience.extract import attempt_from_report
from grader.experience.lessons import MAX_LESSON_CHARS, lesson
from grader.experience.model import Attempt
from grader.report.model import (
    AcceptanceResult,
    BadElement,
    CorrectnessResult,
    Report,
    ReportError,
    RuleOutcome,
    Taint,
    TimingStats,
)


def _lesson(report: Report, **kw: Any) -> str:
    return lesson(attempt_from_report(report, origin="run", task=None, source=None, **kw))


def _timing(median: float = 2.0, floor: float | None = None) -> TimingStats:
    return TimingStats(samples=5, mean_ms=median, median_ms=median, p95_ms=median, std_ms=0.0,
                       min_ms=median, cv=0.0, bandwidth_gbps=100.0, device="cuda",
                       clock="cuda_event", mode="events", cache="cold", roofline_floor_ms=floor)


def _failed_correctness(code: str, bad: BadElement, frac: float) -> Report:
    # The judge's taint mark: a failure on a tune shape comes before any hidden-shape call.
    hidden = bad.shape_kind != "tune"
    return Report(ok=False, stage="correctness", task="vector_add",
                  taint=Taint(hidden_phase="correctness" if hidden else None,
                              sections=["correctness"] if hidden else []),
                  errors=[ReportError(origin="candidate", stage="correctness", code=code, message="see detail",
                                      detail={"first_bad": bad.model_dump()}, after_hidden=hidden)],
                  correctness=CorrectnessResult(passed=False, checks=1, mismatch_fraction=frac,
                                                first_bad=bad))


def test_unwritten_tail_points_at_the_mask() -> None:
    bad = BadElement(tensor="out", index=[999], expected=1.5, actual=None, dims={"N": 1000}, seed=1,
                     shape_kind="hidden")
    text = _lesson(_failed_correctness("output_untouched", bad, 0.008))
    # No task given: every shape not known to be public counts as hidden (grader.grading.redact).
    assert text == "failed correctness: output left unwritten on a hidden shape — check the mask on the tail block"


def test_output_never_written_is_told_apart_from_a_tail() -> None:
    bad = BadElement(tensor="out", index=[0], expected=1.5, actual=None, dims={"N": 1024}, seed=1,
                     shape_kind="tune")
    assert "output never written" in _lesson(_failed_correctness("output_untouched", bad, 1.0))


def test_wrong_only_on_a_hidden_shape_says_tune_shapes_pass() -> None:
    bad = BadElement(tensor="out", index=[0, 0], expected=0.1, actual=0.2, dims={"M": 33, "N": 200},
                     seed=1, shape_kind="hidden")
    text = _lesson(_failed_correctness("wrong_values", bad, 1.0))
    assert text.startswith("failed correctness only on a hidden shape: wrong values on a hidden "
                           "shape (tune shapes pass)")


def test_wrong_almost_everywhere_blames_the_formula() -> None:
    bad = BadElement(tensor="out", index=[0, 0], expected=0.5, actual=0.25, dims={"M": 64, "N": 256},
                     seed=1, shape_kind="tune")
    text = _lesson(_failed_correctness("wrong_values", bad, 0.99))
    assert "99% of elements wrong" in text and "expected 0.5, got 0.25" in text
    assert "the computation itself is wrong" in text


def test_a_few_wrong_elements_point_at_indexing() -> None:
    bad = BadElement(tensor="out", index=[3, 17], expected=0.5, actual=0.25, dims={"M": 64, "N": 256},
                     seed=1, shape_kind="tune")
    text = _lesson(_failed_correctness("wrong_values", bad, 0.01))
    assert text.startswith("failed correctness: 1% of elements wrong, first at index [3, 17]")


def test_compile_error_gives_code_line_and_first_message_line() -> None:
    r = Report(ok=False, stage="compile", errors=[ReportError(origin="candidate", stage="compile", code="import", message="NameError: name 'tl' is not defined\nTraceback...", line=10)])
    assert _lesson(r) == "failed compile (import) at line 10: NameError: name 'tl' is not defined"


def test_scan_denial_names_the_rule_and_line() -> None:
    r = Report(ok=False, stage="scan", errors=[ReportError(origin="candidate", stage="scan", code="no-subprocess", message="subprocess is denied", line=3)])
    assert _lesson(r) == "denied by the scan: rule no-subprocess at line 3 — subprocess is denied"


def test_limits_get_advice() -> None:
    r = Report(ok=False, stage="benchmark", errors=[ReportError(origin="candidate", stage="benchmark", code="timeout",
                                                                message="stopped")])
    assert _lesson(r).startswith("failed benchmark: ran past the time limit")
    r = Report(ok=False, stage="compile", errors=[ReportError(origin="candidate", stage="compile", code="memory_limit",
                                                              message="stopped")])
    assert "memory limit" in _lesson(r)


def test_infrastructure_fault_is_not_the_kernels() -> None:
    r = Report(ok=False, stage="sandbox", errors=[ReportError(origin="infrastructure", stage="sandbox", code="sandbox_unavailable",
                                                              message="no bwrap")])
    assert _lesson(r).startswith("infrastructure fault (sandbox_unavailable): not the kernel's fault")


def test_rejection_states_improvement_against_threshold() -> None:
    acc = AcceptanceResult(accepted=False, rule="seed", improvement_fraction=0.004, pairs=30,
                           positive_fraction=0.6, reason="median improvement 0.004 < 0.01",
                           rules=[RuleOutcome(rule="seed", accepted=False, reason="x",
                                              numbers={"min_improvement_fraction": 0.01})])
    r = Report(ok=False, stage="accept", timing=_timing(), acceptance=acc)
    assert _lesson(r) == ("rejected: 1.004x faster than the current best (median of the paired "
                          "ratios), short of the 1% required")


def test_a_much_slower_rejection_is_a_ratio_not_a_huge_negative_percentage() -> None:
    acc = AcceptanceResult(accepted=False, rule="controlled", improvement_fraction=-17.09, pairs=25,
                           positive_fraction=0.0, reason="futility",
                           rules=[RuleOutcome(rule="seed", accepted=False, reason="x",
                                              numbers={"min_improvement_fraction": 0.01})])
    r = Report(ok=False, stage="accept", timing=_timing(), acceptance=acc)
    assert _lesson(r) == ("rejected: 18.1x slower than the current best (0.0552x, median of the "
                          "paired ratios), short of the 1% required")
    assert "%" not in _lesson(r).replace("1% required", "")


def test_acceptance_lessons() -> None:
    acc = AcceptanceResult(accepted=True, rule="seed", improvement_fraction=0.12, pairs=30,
                           positive_fraction=0.9, reason="ok", replicate_speedup=1.13)
    r = Report(ok=True, stage="accept", timing=_timing(), acceptance=acc)
    assert _lesson(r) == ("accepted: 1.14x faster than the current best (median of 30 paired "
                          "ratios), independent replicate 1.13x")
    first = _lesson(Report(ok=True, stage="benchmark", timing=_timing(3.0)), accepted=True)
    assert first == "accepted as the first correct kernel (no best to pair with); median 3 ms"


def test_passing_kernel_is_placed_on_the_roofline() -> None:
    r = Report(ok=True, stage="benchmark", timing=_timing(2.0))
    text = _lesson(r, roofline_fraction=0.71, bottleneck="memory-bound: AI 0.1 flop/B is below ...")
    assert text == "passed at 0.71 of the copy roofline (median 2 ms)"
    assert _lesson(Report(ok=True, stage="benchmark", timing=_timing(2.0, floor=1.0))) == \
        "passed at 0.50 of the roofline floor (median 2 ms)"
    assert _lesson(Report(ok=True, stage="benchmark", timing=_timing(2.0))) == "passed: median 2 ms, 100 GB/s"
    assert _lesson(Report(ok=True, stage="compile")).startswith("compiled and launched once")


def test_lessons_are_one_bounded_line_without_control_characters() -> None:
    hostile = "boom\x1b[31m red\n\nsecond line\r\t" + "z" * 5000
    r = Report(ok=False, stage="compile", errors=[ReportError(origin="candidate", stage="compile", code="import",
                                                              message=hostile[:3999])])
    text = _lesson(r)
    assert "\n" not in text and "\x1b" not in text and "\r" not in text
    assert len(text) <= MAX_LESSON_CHARS


def test_every_stage_without_a_specific_rule_still_gets_a_lesson() -> None:
    bare = Attempt(key="k", task="t", tags=("t",), origin="run", ok=False, stage="benchmark",
                   created_at="2026-01-01")
    assert lesson(bare) == "failed at benchmark without an error code"
    weird = replace(bare, stage="accept", errors=())
    assert lesson(weird)
