"""The human report in words: the acceptance headline (faster / slower / same within noise /
ambiguous / not measured) above the statistics, from the acceptance record's own figures;
no Python literal (None, a dict's repr) in a line; steps in the order they ran.

The reports under tests/data/reports are real ``kgrader run --json`` outputs (bwrap, CPU,
the Triton interpreter, examples/vector_add_small): good.py against slow.py as the current
best and the other way round, a wrong kernel, a scan denial.
"""

from __future__ import annotations

import io
import math
import random
import re
from pathlib import Path

import pytest
from rich.console import Console

from grader.grading.redact import facts_for, redact
from grader.measure.accept import decide, decide_with_replicate
from grader.report.model import Report
from grader.report.render import ordered_steps, render_report
from grader.report.verdict import acceptance_verdict, improvement_speedup, ratio, speed_words
from grader.task import AcceptanceSpec, load_task
from sandbox.contract import wire

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "tests" / "data" / "reports"


def _report(name: str) -> Report:
    return Report.model_validate_json((REPORTS / f"{name}.json").read_text(encoding="utf-8"))


def _text(report: Report) -> str:
    buf = io.StringIO()
    render_report(report, Console(file=buf, width=400, color_system=None))
    return buf.getvalue()


def _lines(report: Report) -> list[str]:
    return [line.rstrip() for line in _text(report).splitlines()]


def _public(name: str) -> Report:
    spec, _ = load_task(ROOT / "examples" / "vector_add_small")
    return redact(_report(name), facts_for(spec))


# --- golden headlines from real reports --------------------------------------------------


def test_an_accepted_candidate_reads_as_a_ratio_with_its_interval_above_the_statistics() -> None:
    lines = _lines(_report("good_vs_slow"))
    head = ("  acceptance: 39.3x faster than the current best (98% CI 38.0-39.8), accepted; "
            "the independent replicate measured 38.5x")
    assert lines[1] == head
    # above the statistics; the rule's own detail kept below them
    timing = next(i for i, line in enumerate(lines) if "timing:" in line)
    detail = next(i for i, line in enumerate(lines) if "upper bound on median ln(t_cand/t_cur) "
                  "-3.63634 (order statistic 19" in line)
    assert 1 < timing < detail


def test_a_slower_candidate_reads_as_n_times_slower_never_a_huge_negative_percentage() -> None:
    text = _text(_report("slow_vs_good"))
    assert ("  acceptance: 39.2x slower than the current best (0.0255x, 98% CI 0.0248-0.0265), "
            "rejected\n") in text
    assert not re.search(r"-\d{3,}%", text)


def test_the_interval_is_the_sign_tests_order_statistic_bounds() -> None:
    a = _report("good_vs_slow").acceptance
    assert a is not None
    v = acceptance_verdict(a)
    n = next(r for r in a.rules if r.rule == "controlled").numbers
    assert v.low == pytest.approx(math.exp(-n["upper_bound"]))
    assert v.high == pytest.approx(math.exp(-n["lower_bound"]))
    assert v.speedup == pytest.approx(math.exp(-n["median_d"]))
    assert v.confidence == pytest.approx(1 - 2 * n["alpha_per_look"])
    assert v.low < v.speedup < v.high and v.kind == "faster" and v.accepted


def test_a_candidates_copy_with_the_figures_withheld_says_its_coarse_fraction_only() -> None:
    good, slow = _public("good_vs_slow"), _public("slow_vs_good")
    # improvement_fraction kept to 3 digits (0.975, -38.2) said as a ratio, 1 / (1 - f)
    assert _lines(good)[1] == ("  acceptance: 40.0x faster than the current best (median of "
                               "pairs; interval withheld), accepted; the independent replicate "
                               "measured 38.5x")
    assert _lines(slow)[1] == ("  acceptance: 39.2x slower than the current best (0.0255x, median "
                               "of pairs; interval withheld), rejected")
    for r in (good, slow):
        assert "CI" not in _lines(r)[1]


def test_withheld_words_never_sit_on_the_other_side_of_1_from_the_kept_fraction() -> None:
    """Under noise the two sides' paired medians can order one way and the pairs' median
    ratio the other (an A/A run: 1.05x by the medians, improvement_fraction -0.028); the
    words follow the fraction the copy keeps."""
    a = _public("good_vs_slow").acceptance
    assert a is not None
    rules = [r.model_copy(update={"numbers": {**r.numbers, "median_current_ms": 1.05,
                                              "median_candidate_ms": 1.0}}) for r in a.rules]
    for f, kind in ((-0.0279, "slower"), (0.0279, "faster"), (0.0, "same")):
        v = acceptance_verdict(a.model_copy(update={"rules": rules, "accepted": False,
                                                    "improvement_fraction": f}))
        assert v.kind == kind and v.speedup == pytest.approx(1 / (1 - f)), (f, v)
    v = acceptance_verdict(a.model_copy(update={"rules": rules, "accepted": False,
                                                "improvement_fraction": None}))
    assert v.kind == "faster" and v.speedup == pytest.approx(1.05)  # no fraction: the medians


@pytest.mark.parametrize("name", ["good_vs_slow", "slow_vs_good", "wrong", "broken"])
def test_no_python_literal_in_any_line(name: str) -> None:
    for report in (_report(name), _public(name) if name != "broken" else _report(name)):
        text = _text(report)
        assert not re.search(r"\bNone\b|\bTrue\b|\bFalse\b", text), text
        assert "dims {'" not in "\n".join(line for line in text.splitlines()
                                           if "timing:" in line)


def test_a_scan_denial_names_no_device_and_says_no_signal() -> None:
    first = _lines(_report("broken"))[0]
    assert first == "FAIL  task=vector_add_small  stage=scan"


def test_the_sandbox_line_leaves_out_what_did_not_happen() -> None:
    text = _text(_report("wrong"))
    assert "  sandbox: bwrap, wall 6.215 s, exit 0, limit fired: none\n" in text
    killed = _report("wrong").model_copy(deep=True)
    assert killed.sandbox is not None
    killed.sandbox.exit_code, killed.sandbox.signal, killed.sandbox.wall_s = None, 9, None
    assert ("  sandbox: bwrap, wall time not reported, killed by signal 9, limit fired: none\n"
            in _text(killed))


def test_a_failed_correctness_stage_says_where_it_stopped_not_zero_checks() -> None:
    text = _text(_report("wrong"))
    assert ("  correctness: failed: stopped at the first wrong output ('out' on a tune shape, "
            "correctness call); max abs error 8.236\n") in text
    assert "0 checked calls" not in text
    assert "  correctness: passed; 8 checked calls over 4 shapes; max abs error 0\n" in _text(
        _report("good_vs_slow"))


def test_steps_are_listed_in_the_order_they_ran() -> None:
    steps = next(line for line in _lines(_report("good_vs_slow")) if "steps:" in line)
    names = [part.split()[0] for part in steps.split("steps: ")[1].split(", ")]
    assert names == ["scan", "sandbox_setup", "judge_ready", "compile", "compile_inputs",
                     "compile_first_call", "correctness", "benchmark", "accept", "teardown",
                     "total"]
    # the record's key order (alphabetical) does not leak through
    shuffled = dict(sorted({"total": 9.0, "benchmark": 3.0, "compile": 1.0, "accept": 4.0,
                            "correctness": 2.0, "scan": 0.1, "gate_wait": 0.5,
                            "warm_idle": 0.2, "flag": True}.items()))
    assert [k for k, _ in ordered_steps(shuffled)] == [  # type: ignore[arg-type]
        "scan", "warm_idle", "gate_wait", "compile", "correctness", "benchmark", "accept", "total"]


# --- the words for every outcome, from decide() on made-up pairs --------------------------

_SPEC = AcceptanceSpec(rule="controlled", min_improvement_fraction=0.01, min_pairs=5,
                       looks=[25], alpha=0.01)


def _pairs(ratio_: float, n: int = 25, noise: float = 0.0, seed: int = 1) -> tuple[list[float],
                                                                                   list[float]]:
    rng = random.Random(seed)
    cur = [1.0 + 0.01 * rng.random() for _ in range(n)]
    cand = [c / ratio_ * (1 + noise * (rng.random() - 0.5)) for c in cur]
    return cur, cand


def test_same_within_noise() -> None:
    v = acceptance_verdict(decide(*_pairs(1.0, noise=0.002), _SPEC))
    assert v.kind == "same" and not v.accepted
    assert v.text == "same within noise (1.000x, 98% CI 0.9996-1.0005), rejected"


def test_ambiguous_when_the_interval_reaches_past_the_margin() -> None:
    v = acceptance_verdict(decide(*_pairs(1.0, noise=0.2), _SPEC))
    assert v.kind == "ambiguous" and v.text.startswith("ambiguous: more pairs needed (")
    assert v.low is not None and v.high is not None and v.low < 1 < v.high


def test_ambiguous_when_too_few_pairs_give_no_interval() -> None:
    v = acceptance_verdict(decide(*_pairs(2.0, n=3), _SPEC))
    assert v.kind == "ambiguous" and v.low is None
    assert v.text == ("ambiguous: more pairs needed (2.00x; 3 pairs give no interval at this "
                      "level), rejected")


def test_faster_but_short_of_the_margin() -> None:
    v = acceptance_verdict(decide(*_pairs(1.004, noise=0.001), _SPEC))
    assert v.kind == "faster" and not v.accepted
    assert v.text == ("1.004x faster than the current best (98% CI 1.0038-1.0043), less than "
                      "the required margin (x1.01), rejected")


def test_not_confirmed_by_the_replicate() -> None:
    cur, cand = _pairs(1.5)
    rec = wire.AcceptanceRecord(deciding=wire.PairsRecord(t_cur=tuple(cur), t_cand=tuple(cand)),
                                replicate=wire.PairsRecord(t_cur=tuple(cur), t_cand=tuple(cur)))
    v = acceptance_verdict(decide_with_replicate(rec, _SPEC))
    assert v.kind == "ambiguous" and not v.accepted
    assert v.text.startswith("ambiguous: 1.50x faster than the current best (98% CI ")
    assert v.text.endswith(" in the deciding run, not confirmed: the independent replicate "
                           "measured 1.000x, rejected")


def test_not_measured_without_valid_pairs() -> None:
    v = acceptance_verdict(decide([1.0, 2.0], [1.0, float("nan")], _SPEC))
    assert v.kind == "not_measured" and v.text == "not measured (no valid pairs), rejected"
    assert acceptance_verdict(decide([], [], _SPEC)).text == "not measured (no pairs), rejected"


def test_the_seed_rule_reads_the_controlled_rules_bounds() -> None:
    spec = _SPEC.model_copy(update={"rule": "seed"})
    v = acceptance_verdict(decide(*_pairs(1.42, noise=0.01), spec))
    assert v.accepted and v.text.startswith("1.42x faster than the current best (98% CI 1.4")


def test_ratios_and_improvement_fractions_as_words() -> None:
    assert [ratio(x) for x in (1234.5, 37.46, 1.4213, 1.0041, 0.9958, 0.05531, 0.00001)] == [
        "1234", "37.5", "1.42", "1.004", "0.996", "0.0553", "1.0e-05"]
    assert speed_words(1.42) == "1.42x faster than the current best"
    assert speed_words(1 / 18.09, "best.py") == "18.1x slower than best.py (0.0553x)"
    assert speed_words(1.004) == "1.004x faster than the current best"
    assert speed_words(0.9996) == "as fast as the current best (1.000x)"
    # -1709%: (t_cur - t_cand) / t_cur = -17.09, i.e. t_cand = 18.09 t_cur
    assert improvement_speedup(-17.09) == pytest.approx(1 / 18.09)
    assert improvement_speedup(None) is None and improvement_speedup(1.0) is None


# --- a wrong entry-point signature names the call the task makes -------------------------


def test_only_a_typeerror_of_the_entry_point_itself_names_the_expected_call() -> None:
    from grader.grading.summary import _name_the_signature, expected_call
    from grader.report.model import ReportError

    spec, _ = load_task(ROOT / "examples" / "vector_add_small")
    assert expected_call(spec) == ("launch(x, y, out): the inputs, then the preallocated "
                                   "outputs (out), written in place")

    def err(message: str, code: str = "exception") -> ReportError:
        return ReportError(stage="compile", code=code, origin="candidate", message=message)

    named = _name_the_signature(err("TypeError: launch() missing 1 required positional "
                                    "argument: 'out'"), spec)
    assert named.message.endswith("; the task calls launch(x, y, out): the inputs, then the "
                                  "preallocated outputs (out), written in place")
    assert named.detail["expected_call"] == expected_call(spec)
    for other in (err("TypeError: add_kernel() takes 4 positional arguments but 5 were given"),
                  err("ValueError: launch() got a bad argument"),
                  err("TypeError: launch() takes 2 positional arguments but 3 were given",
                      code="current_exception")):
        assert _name_the_signature(other, spec) == other
