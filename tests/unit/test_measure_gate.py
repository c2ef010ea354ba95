"""The measurement gate with real FIFOs and threads: one holder at a time, the judge's side
of the handshake, and the engine's two workers per GPU sharing one gate."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from grader.backends.gate import MeasureGate, Turn, make_fifo
from grader.errors import UsageError
from grader.leaderboard import engine as eng
from sandbox.contract import wire
from sandbox.judge import main as judge


def test_a_turn_writes_the_grant_only_while_it_holds_the_gate(tmp_path: Path) -> None:
    gate = MeasureGate("gpu0")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    ta, tb = Turn(gate, make_fifo(a)), Turn(gate, make_fifo(b))
    assert ta.wait(lambda: True, 5) is not None
    got: list[float | None] = []
    th = threading.Thread(target=lambda: got.append(tb.wait(lambda: True, 30)))
    th.start()
    time.sleep(0.3)
    assert th.is_alive() and got == []  # b waits while a holds the device
    t_release = time.monotonic()
    ta.release()
    th.join(5)
    assert got and got[0] is not None and got[0] >= t_release
    assert gate.grants == 2
    tb.release()
    tb.release()  # idempotent


def test_a_turn_gives_up_when_its_sandbox_died_or_the_wait_is_too_long(tmp_path: Path) -> None:
    gate = MeasureGate()
    with gate.held():
        t = time.monotonic()
        assert Turn(gate, make_fifo(tmp_path)).wait(lambda: False, 30) is None
        assert Turn(gate, tmp_path / wire.GATE_NAME).wait(lambda: True, 0.2) is None
        assert time.monotonic() - t < 5
    turn = Turn(gate, tmp_path / wire.GATE_NAME)
    turn.release()  # never waited: nothing to give back, the gate stays free
    assert turn.wait(lambda: True, 1) is not None
    turn.release()


def test_the_judge_reads_the_grant_and_removes_the_fifo(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(judge, "OUT", str(tmp_path))
    gate = MeasureGate()
    turn = Turn(gate, make_fifo(tmp_path))
    waited: list[float] = []
    th = threading.Thread(target=lambda: waited.append(judge.wait_gate()))
    th.start()
    time.sleep(0.3)
    assert th.is_alive()  # blocked: no grant yet
    turn.wait(lambda: True, 5)
    th.join(5)
    turn.release()
    assert waited and waited[0] >= 0.25
    assert not (tmp_path / wire.GATE_NAME).exists()


def test_the_judge_refuses_a_gate_that_is_not_a_fifo(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(judge, "OUT", str(tmp_path))
    (tmp_path / wire.GATE_NAME).write_bytes(b"g")
    with pytest.raises(OSError, match="not a FIFO"):
        judge.wait_gate()
    (tmp_path / wire.GATE_NAME).unlink()
    os.symlink(tmp_path / "elsewhere", tmp_path / wire.GATE_NAME)
    with pytest.raises(OSError):
        judge.wait_gate()


def test_prepare_ahead_gives_each_gpu_two_workers_and_one_gate() -> None:
    e = eng.LocalEngine(None, "cuda", prepare_ahead=True, gpus=["0", "1"])
    assert e.workers == 4
    slots = [e.slots.get() for _ in range(4)]
    by_gpu: dict[tuple[str, ...], set[int]] = {}
    for ids, gate in slots:
        assert gate is not None
        by_gpu.setdefault(ids, set()).add(id(gate))
    assert sorted(by_gpu) == [("0",), ("1",)] and all(len(g) == 1 for g in by_gpu.values())
    plain = eng.LocalEngine(None, "cuda", gpus=["0", "1"])
    assert plain.workers == 2 and all(plain.slots.get()[1] is None for _ in range(2))


def test_prepare_ahead_is_refused_without_gpus() -> None:
    with pytest.raises(UsageError, match="GPU workers"):
        eng.LocalEngine(2, "cpu", prepare_ahead=True)


def _spec(gate: Turn, wall_s: float) -> Any:
    return SimpleNamespace(limits=SimpleNamespace(wall_s=wall_s), gate=gate, label="t")


def test_the_wall_limit_counts_from_the_grant(tmp_path: Path) -> None:
    from grader.backends.bwrap.supervise import _wait

    gate = MeasureGate()
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    busy = threading.Event()

    def hold(seconds: float) -> None:
        with gate.held():
            busy.set()
            time.sleep(seconds)

    th = threading.Thread(target=hold, args=(1.5,))
    th.start()
    busy.wait(5)
    proc = subprocess.Popen(["sleep", "2"])
    turn = Turn(gate, make_fifo(a))
    # The device is busy for 1.5 s of the process's 2 s; its own limit is 1 s, counted
    # from the grant: it ends 0.5 s into it.
    assert _wait(proc, _spec(turn, 1.0)) is False
    assert turn.granted_at is not None
    turn.release()
    th.join()
    proc2 = subprocess.Popen(["sleep", "5"])
    turn2 = Turn(gate, make_fifo(b))
    assert _wait(proc2, _spec(turn2, 1.0)) is True  # the limit still fires after the grant
    turn2.release()
    proc2.kill()
    proc2.wait()
