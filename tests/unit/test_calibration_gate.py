"""``bench/calibration.py --prepare-ahead``: the proof that no two sandboxes' turns at the
device overlapped (pure logic on the JSON), and the turn that records those intervals (a
real FIFO and a reader thread standing in for the judge's ``wait_gate``)."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest

from grader.backends.gate import MeasureGate

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


analysis = _load("calibration_analysis")
ahead = _load("calibration_ahead")


def iv(grant: float | None, end: float | None) -> dict[str, float | None]:
    return {"grant": grant, "end": end}


def test_disjoint_and_touching_intervals_pass_in_any_order() -> None:
    assert analysis.check_gate([iv(5.0, 6.0), iv(0.0, 1.0), iv(1.0, 2.5), iv(2.6, 5.0)]) == 4
    assert analysis.check_gate([]) == 0


def test_a_grant_before_the_previous_end_is_an_overlap() -> None:
    with pytest.raises(analysis.GateOverlap, match=r"granted at 1\.5"):
        analysis.check_gate([iv(0.0, 2.0), iv(1.5, 3.0)])


def test_an_interval_inside_a_long_one_is_an_overlap_even_after_a_later_gap() -> None:
    # Sorted by grant, [2, 3] follows [0, 10]; [11, 12] alone would hide nothing.
    with pytest.raises(analysis.GateOverlap, match="interval 0"):
        analysis.check_gate([iv(0.0, 10.0), iv(11.0, 12.0), iv(2.0, 3.0)])


@pytest.mark.parametrize("bad", [iv(1.0, None), iv(None, 2.0), iv(3.0, 2.0), {"grant": 1.0}])
def test_an_incomplete_or_reversed_interval_fails_closed(bad: dict[str, float | None]) -> None:
    with pytest.raises(analysis.GateOverlap):
        analysis.check_gate([iv(10.0, 11.0), bad])


def test_a_run_is_checked_across_its_workloads() -> None:
    res = {"workloads": {"4us": {"gate_intervals": [iv(0.0, 4.0)]},
                         "10us": {"gate_intervals": [iv(3.9, 8.0)]}, "1ms": {}}}
    with pytest.raises(analysis.GateOverlap):
        analysis.check_run(res)
    res["workloads"]["10us"]["gate_intervals"] = [iv(4.0, 8.0)]
    assert analysis.check_run(res) == 2


def _saved(tmp: Path, name: str, intervals: list[dict[str, float | None]]) -> Path:
    raw = [{"t_cur": [1.0] * 30, "t_cand": [1.0] * 30}]
    p = tmp / name
    p.write_text(json.dumps({"workloads": {"4us": {"N": 1, "aa": {"raw": raw},
                                                   "gate_intervals": intervals}}}))
    return p


def test_reanalyse_checks_each_file_on_its_own_clock(tmp_path: Path) -> None:
    # Two runs' clocks share no origin: the same figures in two files are no overlap.
    a, b = _saved(tmp_path, "a.json", [iv(0.0, 5.0)]), _saved(tmp_path, "b.json", [iv(1.0, 2.0)])
    assert analysis.reanalyse([a, b], tmp_path / "out.json") == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["gate_check"] == "2 gate intervals, none overlaps"
    assert out["workloads"]["4us"]["aa"]["decisions"] == 1
    bad = _saved(tmp_path, "bad.json", [iv(0.0, 5.0), iv(1.0, 2.0)])
    with pytest.raises(analysis.GateOverlap):
        analysis.reanalyse([a, bad], tmp_path / "out2.json")


class _Judge(threading.Thread):
    """The judge's side of the gate: opens the FIFO for reading after ``delay`` and reads
    the grant byte (sandbox.judge.main.wait_gate)."""

    def __init__(self, fifo: Path, delay: float) -> None:
        super().__init__(daemon=True)
        self.fifo, self.delay = fifo, delay
        self.opened_at: float | None = None
        self.got = b""

    def run(self) -> None:
        time.sleep(self.delay)
        self.opened_at = time.monotonic()
        fd = os.open(self.fifo, os.O_RDONLY)
        try:
            self.got = os.read(fd, 16)
        finally:
            os.close(fd)


def _fifo(tmp: Path, name: str) -> Path:
    p = tmp / name
    os.mkfifo(p, 0o600)
    return p


def test_a_turn_is_granted_only_once_its_judge_waits_and_only_after_the_previous_ended(
        tmp_path: Path) -> None:
    gate = MeasureGate("test")
    first = ahead.DecisionTurn(gate, _fifo(tmp_path, "g1"), lambda: "")
    second = ahead.DecisionTurn(gate, _fifo(tmp_path, "g2"), lambda: "")
    j1, j2 = _Judge(first.fifo, 0.3), _Judge(second.fifo, 0.0)
    j1.start()
    j2.start()
    assert first.wait(lambda: True, 10.0) is not None
    assert first.ready_at is not None and j1.opened_at is not None
    assert first.granted_at is not None and first.granted_at >= first.ready_at >= j1.opened_at
    granted: list[float | None] = []
    waiter = threading.Thread(target=lambda: granted.append(second.wait(lambda: True, 10.0)))
    waiter.start()
    time.sleep(0.3)
    assert not granted, "the second turn was granted while the first held the gate"
    first.release()
    waiter.join(5.0)
    assert granted and granted[0] is not None
    assert first.released_at is not None and second.granted_at is not None
    assert first.granted_at < first.released_at < second.granted_at
    second.release()
    j1.join(5.0)
    j2.join(5.0)
    assert j1.got == b"g" and j2.got == b"g"
    assert analysis.check_gate([
        {"grant": t.granted_at, "end": t.released_at} for t in (first, second)]) == 2


def test_a_stopped_turn_is_refused_without_taking_the_gate(tmp_path: Path) -> None:
    gate = MeasureGate("test")
    reason = [""]
    turn = ahead.DecisionTurn(gate, _fifo(tmp_path, "g"), lambda: reason[0])
    holder = ahead.DecisionTurn(gate, _fifo(tmp_path, "h"), lambda: "")
    judge, other = _Judge(turn.fifo, 0.0), _Judge(holder.fifo, 0.0)
    judge.start()
    other.start()
    assert holder.wait(lambda: True, 10.0) is not None  # the device is busy
    threading.Timer(0.2, lambda: reason.__setitem__(0, "the workload's budget is near")).start()
    assert turn.wait(lambda: True, 10.0) is None
    assert turn.refused() == "the workload's budget is near" and turn.granted_at is None
    turn.release()  # the judge's read ends without a grant, as a killed sandbox's would
    holder.release()
    judge.join(5.0)
    other.join(5.0)
    assert judge.got == b"" and other.got == b"g"
    assert turn.released_at is None and gate._lock.acquire(blocking=False)


class _Turn:
    def __init__(self, t: float) -> None:
        self.granted_at, self.released_at, self.ready_at, self.why = t, t + 1.0, t, ""


@pytest.mark.parametrize("ahead_k,per_sandbox,wanted", [(0, 3, 7), (2, 3, 7), (1, 1, 4), (1, 15, 5)])
def test_decisions_per_sandbox_ask_each_sandbox_for_what_is_left_never_more(
        ahead_k: int, per_sandbox: int, wanted: int) -> None:
    asked: list[int] = []

    class Run(ahead.AheadRun):  # type: ignore[misc, name-defined]
        def _one(self, s: dict[str, object], idx: int, want: int) -> None:
            with self.lock:
                asked.append(want)
            time.sleep(0.01)
            self._record(str(s["name"]), idx, 0.0, _Turn(float(idx)),
                         [{"t_cur": [1.0], "t_cand": [1.0]}] * want, [])

    sc = [{"name": "aa", "decisions": wanted, "pairs": 30}]
    res = Run(sc, {}, None, "", device="cpu", backend=None, ahead=ahead_k, budget_s=60.0,
              gate=MeasureGate("test"), origin=0.0, per_sandbox=per_sandbox).run()
    assert len(res.cal["aa"]["decisions"]) == wanted == sum(asked)
    assert all(1 <= w <= per_sandbox for w in asked)
    assert res.sandboxes == len(asked) >= -(-wanted // per_sandbox)


def test_cpu_slices_give_each_live_sandbox_cores_of_its_own() -> None:
    cpus = list(range(16))
    two = ahead.cpu_slices(cpus, 2)  # --prepare-ahead 1: the measuring one, the next
    assert two == [set(range(8)), set(range(8, 16))]
    three = ahead.cpu_slices(cpus, 3)  # 5 each; the 16th core in none
    assert [len(s) for s in three] == [5, 5, 5] and not set.intersection(*three)
    # Consecutive sandbox numbers (the live ones) never share a slice.
    for n, sl in ((2, two), (3, three)):
        for i in range(1, 20):
            assert not sl[i % n] & sl[(i + 1) % n]


@pytest.mark.parametrize(("ncpu", "n"), [(16, 1), (7, 2), (15, 4), (2, 2)])
def test_no_split_where_a_slice_would_be_too_small_for_pairs_ahead(ncpu: int, n: int) -> None:
    assert ahead.cpu_slices(list(range(ncpu)), n) == []


def test_live_sandboxes_never_share_a_slice_whatever_order_they_end_in() -> None:
    """Each sandbox launches with its thread's affinity set to a slice no live sandbox
    holds; the ends come in random order (slices by sandbox number failed when the second
    sandbox's turn came first). Two slices of one CPU each stand in for a host's halves."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    rng = random.Random(7)
    live: list[str] = []
    seen: list[tuple[str, set[int]]] = []

    class Run(ahead.AheadRun):  # type: ignore[misc, name-defined]
        def _sandbox(self, s: dict[str, object], idx: int, want: int, label: str) -> None:
            with self.lock:
                assert label not in live, (label, live)
                live.append(label)
                seen.append((label, os.sched_getaffinity(0)))
            time.sleep(rng.uniform(0.0, 0.02))
            with self.lock:
                live.remove(label)
            self._record(str(s["name"]), idx, 0.0, _Turn(float(idx)),
                         [{"t_cur": [1.0], "t_cand": [1.0]}] * want, [])

    run = Run([{"name": "aa", "decisions": 40, "pairs": 30}], {}, None, "", device="cpu",
              backend=None, ahead=1, budget_s=60.0, gate=MeasureGate("test"), origin=0.0)
    run.slices = [{cpus[0]}, {cpus[1]}]
    res = run.run()
    assert len(res.cal["aa"]["decisions"]) == 40 and not run.held
    assert {label for label, _ in seen} == {f"{cpus[0]}-{cpus[0]}", f"{cpus[1]}-{cpus[1]}"}
    assert all(aff == {int(label.split("-")[0])} for label, aff in seen)
    assert os.sched_getaffinity(0) == set(cpus)  # the workers restored theirs; this thread untouched
