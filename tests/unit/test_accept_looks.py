"""A deciding run that cannot reach its next look within the stage's run_s stops at the look
it just took (sandbox.judge.acceptance.stop_at_look), and one whose machine slowed down
after a look stops between looks before the stage runs out (stop_between_looks): a verdict
on fewer pairs, never a timeout of an honest kernel on a loaded machine, and never a
chance to accept beyond the planned looks' alpha."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from sandbox.contract import rules
from sandbox.contract.failure import StageFailure
from sandbox.contract.wire import AcceptanceWire
from sandbox.judge import acceptance, evaluation
from sandbox.judge.acceptance import measure_pairs
from sandbox.judge.evaluation import Evaluation

LOOKS = (25, 50, 100, 200)


class Clock:
    """The judge's clock in these tests: each timed call advances it by its own time (in
    seconds), times ``slow`` once ``slow_after`` calls were made (the load rose)."""

    def __init__(self, slow_after: int | None = None, slow: float = 1.0):
        self.now, self.calls, self.slow_after, self.slow = 0.0, 0, slow_after, slow

    def monotonic(self) -> float:
        return self.now

    def spend(self, t: float) -> None:
        self.calls += 1
        late = self.slow_after is not None and self.calls > self.slow_after
        self.now += t * (self.slow if late else 1.0)


def _ev(budget_s: float, t_cand: float, t_cur: float, noise: float = 0.0,
        clock: Clock | None = None) -> Any:
    """A judge whose stage has ``budget_s`` of run_s; a call of a side takes its time."""
    rng = random.Random(1)
    clk = clock or Clock()

    def timed(side: Any, slots: Any, check: bool, stage: str, inputs: Any = None,
              buf: int = 0) -> dict[str, Any]:
        t = (t_cand if side.path == "cand" else t_cur) * (1 + noise * rng.uniform(-1, 1))
        clk.spend(t)
        return {"ms": t, "judge_ms": t + 1.0, "tail_ms": 0.0, "threads": 1, "host_ms": (0.0, 0.0)}

    acc = AcceptanceWire(rule="controlled", min_improvement_fraction=0.01, min_pairs=5,
                         min_positive_fraction=0.6, pairs=6, alpha=0.05, looks=LOOKS)
    return SimpleNamespace(
        task=SimpleNamespace(acceptance=acc, correctness=SimpleNamespace(timed_check_fraction=1.0)),
        slots=lambda: [], inputs=lambda slots: {}, rng=random.Random(0), timed=timed, dev="cpu",
        noop=lambda side, stage: (1.0, 0.0, 0.0, (0.0, 0.0), 0.0), run_deadline=budget_s,
        left=lambda deadline: max(0.0, deadline - clk.now), warnings=[], clock=clk,
        name_current=lambda side: None)


def _pairs(ev: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(acceptance, "scrub", lambda ev, side, slots, buf: None)
    monkeypatch.setattr(acceptance, "time", ev.clock)
    cand: Any = SimpleNamespace(path="cand", bases=[None], longest_s=0.0)
    cur: Any = SimpleNamespace(path="cur", bases=[None], longest_s=0.0)
    return measure_pairs(ev, cand, cur, max(LOOKS), True)


def _accepts(ev: Any, rec: Any) -> bool:
    return acceptance.accepts(ev.task.acceptance, rec)


def test_out_of_time_the_run_stops_at_the_first_look_with_a_warning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ev = _ev(budget_s=60.0, t_cand=1.0, t_cur=1.0, noise=0.2)  # A/A: the test continues at 25
    rec = _pairs(ev, monkeypatch)
    assert len(rec.t_cand) == 25 and not _accepts(ev, rec)
    assert len(ev.warnings) == 1 and "stopped at its look of 25 pairs" in ev.warnings[0]


def test_with_time_left_the_run_goes_on_to_its_planned_looks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ev = _ev(budget_s=1e9, t_cand=1.0, t_cur=1.0, noise=0.2)
    rec = _pairs(ev, monkeypatch)
    assert len(rec.t_cand) > 25 and ev.warnings == []


def test_a_clear_improvement_is_still_accepted_at_the_look_that_decides(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ev = _ev(budget_s=40.0, t_cand=0.5, t_cur=1.0, noise=0.05)  # decided at 25: nothing stops
    rec = _pairs(ev, monkeypatch)
    assert len(rec.t_cand) == 25 and _accepts(ev, rec) and ev.warnings == []


def test_stopping_at_a_look_never_accepts_what_that_look_did_not() -> None:
    """The host's decision on the pairs up to a look the test continued at is a rejection:
    the early stop gives no extra chance to accept, whatever made the pairs slow."""
    checked = 0
    for seed in range(300):
        rng = random.Random(seed)
        gain = rng.choice([0.0, 0.01, 0.03, 0.1])
        t_cur = [1.0 + 0.3 * rng.random() for _ in range(max(LOOKS))]
        t_cand = [t * (1 - gain) * (1 + 0.3 * rng.uniform(-1, 1)) for t in t_cur]
        seq = rules.SequentialSignTest(delta=0.01, alpha=0.05, looks=LOOKS)
        for n, (c, d) in enumerate(zip(t_cur, t_cand, strict=True), start=1):
            seq.add(c, d)
            if n in LOOKS and seq.decision() == "continue":
                checked += 1
                assert not rules.rule_accepts(t_cur[:n], t_cand[:n], rule="controlled",
                                              min_pairs=5, min_improvement_fraction=0.01,
                                              min_positive_fraction=0.6, alpha=0.05, looks=LOOKS)
            if seq.decision() != "continue":
                break
    assert checked > 100  # the continuing looks were exercised


def test_a_load_rising_between_looks_stops_the_run_there_and_the_rule_looks_once_more(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A/A, a pair takes ~2 s; from the 29th pair on ten times that: at the look of 25 the
    # next look fitted in 150 s, after it the load rose
    ev = _ev(budget_s=150.0, t_cand=1.0, t_cur=1.0, noise=0.2, clock=Clock(2 * 28, 10.0))
    rec = _pairs(ev, monkeypatch)
    n = len(rec.t_cand)
    assert 29 < n < 50 and ev.clock.now <= 150.0  # stopped in time, between the looks
    assert len(ev.warnings) == 1 and f"stopped after {n} pairs, between its planned looks" \
        in ev.warnings[0]
    res = rules.controlled_rule(rec.t_cur, rec.t_cand, delta=0.01, alpha=0.05, looks=LOOKS,
                                min_pairs=5)
    assert res.pairs == n and res.looks_taken[-1].pairs == n and not res.accepted
    assert len(res.looks_taken) <= len(LOOKS)


def test_stopping_between_looks_keeps_the_false_accept_rate_of_the_planned_looks() -> None:
    """The host's decision on pairs cut at any count by the clock: A/A never beyond alpha.
    Pairs of identical kernels under noise, cut at a pair count drawn independently of
    them (the clock), accepted at most alpha of the time (here 0 of 400 at alpha 0.05 per
    run; Bonferroni is conservative)."""
    accepted = 0
    for seed in range(400):
        rng = random.Random(seed)
        n = rng.randint(26, 199)
        t_cur = [1.0 + 0.3 * rng.random() for _ in range(n)]
        t_cand = [1.0 + 0.3 * rng.random() for _ in range(n)]
        accepted += rules.rule_accepts(t_cur, t_cand, rule="controlled", min_pairs=5,
                                       min_improvement_fraction=0.01, min_positive_fraction=0.6,
                                       alpha=0.05, looks=LOOKS)
    assert accepted <= 0.05 * 400


def test_the_pace_follows_a_rising_load() -> None:
    assert acceptance.pace([1.0] * 20) == 1.0
    assert acceptance.pace([1.0] * 20 + [5.0] * 5) == 5.0
    assert acceptance.pace([5.0] * 20 + [1.0] * 5) == 4.2  # the mean of all: not the fast stretch


def _clocked_ev(budget_s: float, stall: dict[str, float], clk: Clock,
                monkeypatch: pytest.MonkeyPatch) -> Any:
    """A judge whose calls go through the real stage clock (``Evaluation.check_clock`` before
    each call, ``Evaluation.answered`` after it): a side's ``n``-th call stalls for
    ``stall["<path>:<n>"]`` seconds."""
    monkeypatch.setattr(evaluation, "time", clk)
    made: dict[str, int] = {}
    ev: Any = SimpleNamespace(t0=0.0, stage_t0=0.0, answers={}, roles={})

    def timed(side: Any, slots: Any, check: bool, stage: str, inputs: Any = None,
              buf: int = 0) -> dict[str, Any]:
        Evaluation.check_clock(ev, "accept", budget_s)
        made[side.path] = made.get(side.path, 0) + 1
        t = 1.0 + stall.get(f"{side.path}:{made[side.path]}", 0.0)
        clk.spend(t)
        Evaluation.answered(ev, side, t)
        return {"ms": t, "judge_ms": t + 1.0, "tail_ms": 0.0, "threads": 1, "host_ms": (0.0, 0.0)}

    base = _ev(budget_s, 1.0, 1.0, clock=clk)
    vars(ev).update({**vars(base), "timed": timed,
                     "name_current": lambda side: Evaluation.name_current(ev, side),
                     "run_deadline": 1e9})  # the looks' own stop kept out of the way
    return ev


def _failure(ev: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    with pytest.raises(StageFailure) as info:
        _pairs(ev, monkeypatch)
    return info.value.error


def test_a_stage_run_out_by_the_candidates_stall_is_the_candidates_whoever_calls_next(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # pairs go (cand, cur), (cur, cand), (cand, cur): the candidate's 3rd call, the first of
    # the third pair, stalls 200 s; the current best calls next
    ev = _clocked_ev(150.0, {"cand:3": 200.0}, Clock(), monkeypatch)
    e = _failure(ev, monkeypatch)
    assert e.code == "timeout" and e.origin == "candidate" and e.detail["overrun_by"] == "candidate"
    assert e.message.startswith("the accept stage ran out of its 150 s: the candidate's own calls")
    assert e.detail["candidate_answers_s"] == 203.0 and e.detail["current_answers_s"] == 2.0


def test_a_stage_run_out_by_the_current_bests_stall_is_the_current_bests(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the current best's 2nd call, the first of the second pair, stalls; the candidate
    # calls next
    ev = _clocked_ev(150.0, {"cur:2": 200.0}, Clock(), monkeypatch)
    e = _failure(ev, monkeypatch)
    assert e.code == "current_timeout" and e.detail["overrun_by"] == "current"
    assert "the current best's own calls took 202.0 s of 203.0 s" in e.message


def test_a_stage_run_out_by_both_sides_alike_is_the_harnesss_and_retried(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A/A on a machine where every call slowed tenfold: each side took under half the stage
    ev = _clocked_ev(150.0, {}, Clock(slow_after=4, slow=10.0), monkeypatch)
    e = _failure(ev, monkeypatch)
    assert e.code == "harness_timeout" and e.origin == "infrastructure"
    assert e.detail["overrun_by"] == "harness"
