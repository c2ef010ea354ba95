"""WarmTurn: ready when the judge waits at its FIFO, claimed once, granted only once staged.

A real FIFO and a thread in the judge's place (``sandbox.judge.main.wait_gate``'s open and
read); no sandbox.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from grader.backends.gate import MeasureGate
from grader.pool.turn import WarmTurn


class FakeJudge(threading.Thread):
    """Opens the gate's FIFO for reading (blocking, as the judge does) and reads once."""

    def __init__(self, fifo: Path, delay: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.fifo, self.delay = fifo, delay
        self.got: bytes | None = None

    def run(self) -> None:
        time.sleep(self.delay)
        fd = os.open(self.fifo, os.O_RDONLY)
        try:
            self.got = os.read(fd, 16)
        finally:
            os.close(fd)


def _fifo(tmp_path: Path) -> Path:
    p = tmp_path / ".gate"
    os.mkfifo(p, 0o600)
    return p


def _waiter(turn: WarmTurn, alive: list[bool] | None = None) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []
    flag = alive if alive is not None else [True]
    t = threading.Thread(target=lambda: out.append(turn.wait(lambda: flag[0], 5.0)), daemon=True)
    t.start()
    return t, out


def _state(turn: WarmTurn) -> str:
    return turn.state  # read afresh (another thread moves it)


def _until(pred: object, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_the_turn_is_ready_only_once_the_judge_waits_and_grants_only_once_staged(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path)
    turn = WarmTurn(fifo, None, start_s=5, idle_s=5)
    waiter, out = _waiter(turn)
    time.sleep(0.2)
    assert _state(turn) == "starting" and not turn.claim()  # no reader yet: not ready
    judge = FakeJudge(fifo)
    judge.start()
    assert _until(lambda: turn.state == "ready")
    assert turn.claim() and not turn.claim()  # claimed once; a second claim is refused
    time.sleep(0.2)
    assert judge.is_alive() and judge.got is None  # taken but not staged: no grant yet
    turn.staged()
    waiter.join(5)
    judge.join(5)
    assert judge.got == b"g" and isinstance(out[0], float) and turn.refused() == ""
    turn.release()


def test_an_unused_ready_turn_expires_without_a_grant(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path)
    turn = WarmTurn(fifo, None, start_s=5, idle_s=0.3)
    judge = FakeJudge(fifo)
    judge.start()
    waiter, out = _waiter(turn)
    waiter.join(5)
    assert out == [None] and turn.state == "discarded" and "not used" in turn.why
    assert "not used" in turn.refused()  # the supervisor logs a discard, not a host fault
    assert not turn.claim()
    turn.release()  # the judge's read ends without a byte: it would refuse to go on
    judge.join(5)
    assert judge.got == b""


def test_a_judge_that_never_reaches_its_gate_is_not_ready_in_time(tmp_path: Path) -> None:
    turn = WarmTurn(_fifo(tmp_path), None, start_s=0.3, idle_s=5)
    waiter, out = _waiter(turn)
    waiter.join(5)
    assert out == [None] and turn.ready_at is None and "not ready" in turn.why


def test_a_dead_judge_ends_the_wait(tmp_path: Path) -> None:
    turn = WarmTurn(_fifo(tmp_path), None, start_s=5, idle_s=5)
    alive = [True]
    waiter, out = _waiter(turn, alive)
    alive[0] = False
    waiter.join(5)
    assert out == [None]


def test_a_discarded_taken_turn_gets_no_grant(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path)
    turn = WarmTurn(fifo, None, start_s=5, idle_s=5)
    judge = FakeJudge(fifo)
    judge.start()
    waiter, out = _waiter(turn)
    assert _until(lambda: turn.state == "ready") and turn.claim()
    turn.discard("denied by the scan")
    waiter.join(5)
    assert out == [None] and turn.state == "discarded"
    turn.release()
    judge.join(5)
    assert judge.got == b""


def test_the_grant_waits_for_the_devices_gate(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path)
    gate = MeasureGate("gpu0")
    turn = WarmTurn(fifo, gate, start_s=5, idle_s=5)
    judge = FakeJudge(fifo)
    judge.start()
    with gate.held():  # another sandbox measures
        waiter, out = _waiter(turn)
        assert _until(lambda: turn.state == "ready") and turn.claim()
        turn.staged()
        time.sleep(0.3)
        assert judge.got is None and out == []
    waiter.join(5)
    judge.join(5)
    assert judge.got == b"g" and gate.grants == 1
    turn.release()
