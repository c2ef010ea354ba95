"""Speed figures of the agent tools (grader/agent/speed.py): pure logic over reports built
by the real acceptance code (grader.measure.accept.decide), no sandbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from grader.agent import speed, tools
from grader.measure.accept import decide
from grader.report.model import Report, TimingStats
from grader.task import AcceptanceSpec

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "examples" / "vector_add_small"


def _report(t_cur: list[float] | None, t_cand: list[float] | None, median_ms: float = 1.0) -> Report:
    acc = decide(t_cur, t_cand, AcceptanceSpec()) if t_cur is not None and t_cand is not None else None
    timing = TimingStats(samples=5, mean_ms=median_ms, median_ms=median_ms, p95_ms=median_ms,
                         std_ms=0.0, min_ms=median_ms, cv=0.0, device="cpu",
                         clock="perf_counter", mode="perf_counter", cache="cold")
    return Report(ok=True, stage="accept", acceptance=acc, timing=timing)


@pytest.fixture()
def ws(tmp_path: Path) -> tools.Workspace:
    return tools.init_workspace(tmp_path / "ws", TASK, backend="bwrap", device="cpu")


def test_paired_speedup_is_the_ratio_of_the_pair_medians() -> None:
    f = speed.paired_figures("reference", _report([2.0, 2.2, 1.8, 2.0, 2.1], [1.0, 1.1, 0.9, 1.0, 1.0]))
    assert f["reference_ms"] == pytest.approx(2.0) and f["candidate_paired_ms"] == pytest.approx(1.0)
    assert f["speedup_vs_reference"] == pytest.approx(2.0)
    assert f["reference_source"].startswith("paired") and f["unmeasured"] == {}


def test_a_paired_time_at_the_clock_floor_is_unmeasured_not_a_speedup() -> None:
    f = speed.paired_figures("reference", _report([1e-6] * 6, [40.0] * 6))
    assert f["reference_ms"] is None and f["speedup_vs_reference"] is None
    assert "clock's floor" in f["unmeasured"]["reference_ms"]


def test_no_pairs_says_why() -> None:
    f = speed.paired_figures("best", _report(None, None))
    assert f["best_ms"] is None and "stopped before the paired timing" in f["unmeasured"]["best_ms"]


def _out(accepted: bool, speedup: float | None) -> dict[str, Any]:
    return {"accepted": accepted, "speedup_vs_reference": speedup, "warnings": [],
            "reason": "first correct candidate", "unmeasured": {}}


def test_a_first_kernel_slower_than_the_reference_is_flagged_never_silent() -> None:
    out = _out(True, 0.25)
    speed.flag_slower(out)
    assert out["slower_than_reference"] is True
    assert "4.00x slower" in out["warnings"][0] and "4.00x slower" in out["reason"]
    fast = _out(True, 2.0)
    speed.flag_slower(fast)
    assert fast["slower_than_reference"] is False and fast["warnings"] == []
    unknown = _out(True, None)
    speed.flag_slower(unknown)
    assert unknown["slower_than_reference"] is None and unknown["warnings"]


def test_best_time_is_recorded_and_valid_only_for_that_best(
        ws: tools.Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.records import Records

    assert speed.best_figures(ws, 1.0)["best_ms"] is None  # no best.py
    src = (TASK / "candidates" / "good.py").read_text()
    best = {"src": src}
    monkeypatch.setattr(Records, "best_source", lambda self: best["src"])
    speed.record_best_time(ws, src, _report(None, None, median_ms=4.0))
    f = speed.best_figures(ws, 2.0)
    assert f["best_ms"] == 4.0 and f["speedup_vs_best"] == pytest.approx(2.0)
    assert f["best_source"].startswith("recorded")
    best["src"] = src + "\n# changed\n"  # best.py replaced by something else
    stale = speed.best_figures(ws, 2.0)
    assert stale["best_ms"] is None and "not recorded" in stale["unmeasured"]["best_ms"]


def test_reference_time_comes_from_the_cache_when_there(ws: tools.Workspace) -> None:
    speed.remember_reference(ws, 0.5, "paired", {"M": 64, "N": 1024})
    f = speed.reference_figures(ws, 2.0)  # cached: no sandbox run
    assert f["reference_ms"] == 0.5 and f["speedup_vs_reference"] == pytest.approx(0.25)
    assert f["reference_source"].startswith("cached") and "paired" in f["reference_source"]


def _bench_with_pair_error(ws: tools.Workspace, monkeypatch: pytest.MonkeyPatch, code: str,
                           origin: str) -> dict[str, Any]:
    """bench_kernel's result when the candidate's stages passed and its pair with the
    reference ended ``code`` (the sandbox run replaced by that report)."""
    from grader.report.model import CorrectnessResult, ReportError
    err = ReportError(stage="accept", code=code, origin=origin, message="10 of 12 timed calls "
                      "took no longer than the empty calls beside them")
    rep = _report(None, None, median_ms=0.05).model_copy(update={
        "ok": False, "errors": [err], "correctness": CorrectnessResult(passed=True, checks=8)})
    monkeypatch.setattr(tools, "_evaluate", lambda *a, **k: rep)
    return tools.bench_kernel(ws, "print('not run')\n")


def test_a_reference_pair_spoiled_by_load_leaves_the_bench_standing(
        ws: tools.Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    # CI, loaded 2-core host: every try of bench failed on the pair's timing_unreliable
    # though the candidate compiled, passed correctness and was timed.
    out = _bench_with_pair_error(ws, monkeypatch, "timing_unreliable", "infrastructure")
    assert out["ok"] and out["correct"] and out["errors"] == [] and out["stage"] == "benchmark"
    assert out["median_ms"] == pytest.approx(0.05) and out["speedup_vs_reference"] is None
    why = out["unmeasured"]["speedup_vs_reference"]
    assert "timing_unreliable (infrastructure)" in why and "own benchmark stands" in why
    assert any("timing_unreliable" in w for w in out["warnings"])


def test_a_violation_during_the_reference_pair_still_fails_the_bench(
        ws: tools.Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    out = _bench_with_pair_error(ws, monkeypatch, "work_between_calls", "candidate")
    assert not out["ok"] and [e["code"] for e in out["errors"]] == ["work_between_calls"]
