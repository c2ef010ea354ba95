"""The judge's live steps: the line format (HMAC, strict fields), the judge's writer (never
blocks, never fails, leaves out/ empty) and the host's reader (believes only verified,
increasing lines, on a thread of its own, stops on a flood). Real FIFOs, real threads."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from grader.backends.progress import MAX_BYTES, JudgeProgress, make_progress_fifo, step_of
from grader.logs import on_step, relay
from sandbox.contract import wire
from sandbox.judge import progress as judge_progress

KEY = b"k" * 32


@pytest.fixture(autouse=True)
def _fresh_judge_channel(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(judge_progress, "_fd", None)
    monkeypatch.setattr(judge_progress, "_n", 0)
    yield
    fd = judge_progress._fd
    if fd is not None:
        os.close(fd)


class Seen:
    def __init__(self) -> None:
        self.steps: list[tuple[str, dict[str, Any], str]] = []
        self.cond = threading.Condition()

    def __call__(self, name: str, fields: Mapping[str, Any]) -> None:
        with self.cond:
            self.steps.append((name, dict(fields), threading.current_thread().name))
            self.cond.notify_all()

    def wait_for(self, n: int, timeout: float = 5.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.steps) >= n, timeout), self.steps


def test_a_line_round_trips_and_any_forgery_is_refused() -> None:
    ev = wire.ProgressEvent(3, "compile", "done", 0.5)
    line = wire.progress_line(KEY, ev).rstrip(b"\n")
    assert wire.read_progress_line(KEY, line) == ev
    assert wire.read_progress_line(b"x" * 32, line) is None  # another key
    body, mac = line.rsplit(b" ", 1)
    assert wire.read_progress_line(KEY, body.replace(b"compile", b"accept") + b" " + mac) is None
    bad = wire.ProgressEvent(1, "owned", "done", 1.0)  # a step outside the contract
    assert wire.read_progress_line(KEY, wire.progress_line(KEY, bad).rstrip(b"\n")) is None
    assert wire.read_progress_line(KEY, b"garbage") is None
    assert wire.read_progress_line(KEY, b"x" * 300 + b" " + mac) is None
    assert len(wire.progress_line(KEY, wire.ProgressEvent(10**9, "correctness", "done", 1e6))) \
        <= wire.MAX_PROGRESS_LINE


def test_the_judge_tells_the_host_live_and_leaves_out_empty(tmp_path: Path) -> None:
    make_progress_fifo(tmp_path)
    seen = Seen()
    reader = JudgeProgress(tmp_path, KEY, seen)
    try:
        judge_progress.open_channel(str(tmp_path), KEY)
        assert os.listdir(tmp_path) == []  # unlinked at open: nothing else can open it now
        judge_progress.tell("judge", "start")
        judge_progress.tell("compile", "start")
        seen.wait_for(2)  # arrived while the "sandbox" still runs, not at close
        judge_progress.tell("compile", "done", 0.25)
        seen.wait_for(3)
    finally:
        reader.close()
    names = [(n, f) for n, f, _ in seen.steps]
    assert names[0][0] == "judge: sandbox started" and "s" in names[0][1]
    assert names[1:] == [("judge: compile running", {}), ("judge: compile", {"s": 0.25})]
    assert {t for _, _, t in seen.steps} == {f"kgrader-progress-{tmp_path.parent.name}"}
    assert [e.n for e in reader.events] == [1, 2, 3]


def test_forged_replayed_and_broken_lines_are_not_believed(tmp_path: Path) -> None:
    fifo = make_progress_fifo(tmp_path)
    seen = Seen()
    reader = JudgeProgress(tmp_path, KEY, seen)
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        good = wire.progress_line(KEY, wire.ProgressEvent(5, "compile", "done", 1.0))
        forged = wire.progress_line(b"f" * 32, wire.ProgressEvent(6, "accept", "done", 1.0))
        replay = wire.progress_line(KEY, wire.ProgressEvent(4, "benchmark", "done", 1.0))
        os.write(fd, forged + b"kgrader run: judge: acceptance s=1\n" + good + replay)
        os.write(fd, wire.progress_line(KEY, wire.ProgressEvent(7, "benchmark", "start")))
        seen.wait_for(2)
    finally:
        os.close(fd)
        reader.close()
    assert [n for n, _, _ in seen.steps] == ["judge: compile", "judge: timing running"]


def test_a_flood_stops_the_reader_and_a_failing_sink_is_ignored(tmp_path: Path) -> None:
    fifo = make_progress_fifo(tmp_path)

    def broken(name: str, fields: Mapping[str, Any]) -> None:
        raise RuntimeError("a listener that fails")

    reader = JudgeProgress(tmp_path, KEY, broken)
    fd = os.open(fifo, os.O_WRONLY)
    try:
        os.write(fd, wire.progress_line(KEY, wire.ProgressEvent(1, "compile", "start")))
        junk = b"y" * 60000 + b"\n"
        t0 = time.monotonic()
        sent = 0
        os.set_blocking(fd, False)
        while sent <= MAX_BYTES * 2 and time.monotonic() - t0 < 10:
            try:
                sent += os.write(fd, junk)
            except BlockingIOError:
                if not reader._thread.is_alive():
                    break
                time.sleep(0.01)
        reader._thread.join(5)
        assert not reader._thread.is_alive()  # stopped reading: the flood costs no more CPU
    finally:
        os.close(fd)
        reader.close()
    assert [e.step for e in reader.events] == ["compile"]


def test_the_judge_never_blocks_or_fails_on_a_full_or_missing_pipe(tmp_path: Path) -> None:
    judge_progress.tell("compile", "start")  # no channel: nothing, no error
    judge_progress.open_channel(str(tmp_path), KEY)  # no FIFO (an older host): nothing
    judge_progress.tell("compile", "start")
    fifo = make_progress_fifo(tmp_path)
    host = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a host that never reads
    try:
        judge_progress.open_channel(str(tmp_path), KEY)
        assert judge_progress._fd is not None and not fifo.exists()
        t0 = time.monotonic()
        for _ in range(2000):  # ~200 KB: far past a pipe's 64 KiB
            judge_progress.tell("correctness", "done", 1.0)
        assert time.monotonic() - t0 < 2.0
    finally:
        os.close(host)
    judge_progress.tell("benchmark", "start")  # the reader gone (EPIPE): dropped, no signal


def test_relay_reaches_the_listeners_of_the_thread_that_asked() -> None:
    seen = Seen()
    with on_step(seen):
        send = relay()
        t = threading.Thread(target=send, args=("judge: compile", {"s": 1.0}), name="reader")
        t.start()
        t.join()
    assert [(n, f) for n, f, _ in seen.steps] == [("judge: compile", {"s": 1.0})]


def test_step_names() -> None:
    assert step_of(wire.ProgressEvent(1, "benchmark", "start")) == ("judge: timing running", {})
    assert step_of(wire.ProgressEvent(2, "accept", "done", 1.23456)) == \
        ("judge: acceptance", {"s": 1.235})
