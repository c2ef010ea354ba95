"""Calibrate mode's loop (sandbox/judge/rule_calibration.run_calibration) with fresh runners:
a decision that ended ``timing_unreliable`` is dropped and the next gets its fresh pair;
any other failure, or one too many, still ends the run. The sides and the measurement are
stand-ins: what is tested is the loop's bookkeeping."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from sandbox.contract.failure import StageFailure
from sandbox.contract.wire import PairsRecord
from sandbox.judge import rule_calibration


def _run(monkeypatch: pytest.MonkeyPatch, outcomes: list[str], decisions: int,
         fresh: bool = True) -> tuple[dict[str, Any], list[object]]:
    opened: list[object] = []
    closed: list[object] = []
    calls = iter(outcomes)

    def fake_open(ev: Any, sc: dict[str, Any]) -> tuple[object, object]:
        pair = (object(), object())
        opened.extend(pair)
        return pair

    def fake_measure(ev: Any, cand: object, cur: object, n: int, seq: bool, **kw: Any) -> PairsRecord:
        what = next(calls)
        if what != "ok":
            code, origin = what.split(":")
            raise StageFailure("accept", code, f"{code} here", origin=origin)  # type: ignore[arg-type]
        kw["empty"].update(cur=0.01, cand=0.01)
        return PairsRecord(t_cur=(1.0,), t_cand=(1.0,))

    monkeypatch.setattr(rule_calibration, "_open", fake_open)
    monkeypatch.setattr(rule_calibration, "measure_pairs", fake_measure)
    monkeypatch.setattr(rule_calibration, "runner_ids_left", lambda: 30)
    sc = {"name": "aa", "candidate": "c.py", "current": "r.py", "decisions": decisions,
          "pairs": 10, "fresh_runners": fresh}
    ev: Any = SimpleNamespace(req=SimpleNamespace(calibrate=SimpleNamespace(
        scenarios=(sc,), decisions=decisions, pairs=10)), run_deadline=time.monotonic() + 600,
        left=lambda d: d - time.monotonic(), close_side=closed.append, stage=None,
        calibration=None)
    rule_calibration.run_calibration(ev)
    assert sorted(map(id, closed)) == sorted(map(id, opened))  # every pair closed
    return ev.calibration["aa"], opened


UNRELIABLE = "timing_unreliable:infrastructure"


def test_an_unreliable_decision_is_dropped_and_the_next_gets_a_fresh_pair(
        monkeypatch: pytest.MonkeyPatch) -> None:
    out, opened = _run(monkeypatch, ["ok", UNRELIABLE, "ok", "current_" + UNRELIABLE, "ok"], 3)
    assert len(out["decisions"]) == 3 and len(out["dropped"]) == 2
    assert [d["code"] for d in out["dropped"]] == ["timing_unreliable", "current_timing_unreliable"]
    assert len(opened) == 2 * 5  # a fresh pair for each of the five measurements


def test_one_unreliable_decision_too_many_ends_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    seq = ["ok"] + [UNRELIABLE] * (rule_calibration.MAX_DROPPED + 1) + ["ok"]
    with pytest.raises(StageFailure) as e:
        _run(monkeypatch, seq, 5)
    assert e.value.error.code == "timing_unreliable"


@pytest.mark.parametrize("what", ["gpu_busy_between_calls:candidate",
                                  "work_escaped_timing:candidate"])
def test_a_failure_blamed_on_a_side_is_never_dropped(monkeypatch: pytest.MonkeyPatch,
                                                     what: str) -> None:
    with pytest.raises(StageFailure) as e:
        _run(monkeypatch, ["ok", what, "ok"], 3)
    assert e.value.error.code == what.split(":")[0]


def test_shared_runners_drop_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(StageFailure):
        _run(monkeypatch, ["ok", UNRELIABLE, "ok"], 3, fresh=False)
