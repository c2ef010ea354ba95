"""The judge's live steps on the host: read from the FIFO in the sandbox's ``out/`` folder
while the sandbox runs, for both backends (``out/`` is bound into either).

:func:`make_progress_fifo` makes the FIFO when the folder is staged (0600, the judge's uid,
in the folder only that uid can enter); :class:`JudgeProgress` holds it open for reading
and writing (the judge's non-blocking open for writing then always finds a reader, and the
FIFO never reads as closed) and reads it on a thread of its own, blocked in ``poll`` until
a line or the stop comes: nothing runs between steps. A line is believed only when its MAC
verifies with the evaluation's key and its number is above the last one
(:func:`sandbox.contract.wire.read_progress_line`); anything else is dropped, and past
:data:`MAX_BYTES` in all the reader stops. A sink that fails is logged and ignored:
progress never delays or fails a grade.
"""

from __future__ import annotations

import contextlib
import os
import select
import stat
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from grader.logs import get_logger
from sandbox.contract import wire

log = get_logger("kgrader.progress")
MAX_BYTES = 1 << 20  # a judge tells a few dozen lines; more is not read
# How each step is named to people (grader.cli.progress shows them as ``judge: LABEL``).
LABELS = {"judge": "sandbox started", "judge_ready": "judge ready", "compile": "compile",
          "correctness": "correctness", "benchmark": "timing", "accept": "acceptance"}
Sink = Callable[[str, Mapping[str, Any]], None]


def make_progress_fifo(out_dir: Path) -> Path:
    """The live steps' FIFO in an evaluation's ``out/`` folder, for the judge's uid only."""
    path = out_dir / wire.PROGRESS_NAME
    os.mkfifo(path, 0o600)
    if os.geteuid() == 0:
        os.chown(path, wire.JUDGE_UID, wire.JUDGE_GID)
    return path


def step_of(event: wire.ProgressEvent, launched: float | None = None) -> tuple[str, dict[str, Any]]:
    """The step people see for ``event``: ``judge: compile`` ``running`` at its start,
    ``judge: compile`` with ``s=`` at its end (``launched``: the monotonic time the sandbox
    was launched, for the seconds to the judge's start)."""
    label = f"judge: {LABELS.get(event.step, event.step)}"
    if event.step == "judge":
        return label, ({"s": round(time.monotonic() - launched, 3)} if launched else {})
    if event.state == "start":
        return f"{label} running", {}
    return label, {"s": None if event.seconds is None else round(event.seconds, 3)}


class JudgeProgress:
    """Reads one sandbox's live steps until :meth:`close`; each believed step goes to
    ``sink`` (as ``(name, fields)``, :func:`step_of`) when one is set, and to ``events``.
    ``sink`` may be set later (a warm sandbox's evaluation arrives after its start): steps
    told before that are kept in ``events`` only."""

    def __init__(self, out_dir: Path, key: bytes, sink: Sink | None = None) -> None:
        self.key, self.sink = key, sink
        self.events: list[wire.ProgressEvent] = []
        self.launched = time.monotonic()
        path = out_dir / wire.PROGRESS_NAME
        self._fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        if not stat.S_ISFIFO(os.fstat(self._fd).st_mode):
            os.close(self._fd)
            raise OSError(f"{path} is not the live steps' FIFO")
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._buf, self._read, self._last = b"", 0, 0
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"kgrader-progress-{out_dir.parent.name}")
        self._thread.start()

    @classmethod
    def open(cls, out_dir: Path, key: bytes, sink: Sink | None = None) -> JudgeProgress | None:
        """A reader, or None when the folder has no FIFO or it cannot be read (logged:
        the evaluation goes on without live steps)."""
        try:
            return cls(out_dir, key, sink)
        except OSError as e:
            log.info("progress_unavailable", error=str(e))
            return None

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if not self._drain():
                    return
                if self._wake_r in ready:
                    return
        except Exception as e:  # never the grade's problem
            log.warning("progress_reader_failed", error=repr(e))

    def _drain(self) -> bool:
        """Read what the pipe holds; False once the reader must stop (too much, an error)."""
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return True
            self._read += len(chunk)
            if self._read > MAX_BYTES:
                log.warning("progress_flood", bytes=self._read)
                return False
            self._buf += chunk
            *lines, self._buf = self._buf.split(b"\n")
            if len(self._buf) > wire.MAX_PROGRESS_LINE:
                self._buf = b""
            for line in lines:
                self._take(line)

    def _take(self, line: bytes) -> None:
        event = wire.read_progress_line(self.key, line)
        if event is None or event.n <= self._last:
            if line:
                log.info("progress_line_dropped", bytes=len(line))
            return
        self._last = event.n
        self.events.append(event)
        sink = self.sink
        if sink is not None:
            try:
                sink(*step_of(event, self.launched))
            except Exception as e:
                log.warning("progress_sink_failed", error=repr(e))

    def close(self) -> None:
        """Read what is left, stop the reader, close the FIFO. Safe to call twice."""
        if self._wake_w < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        self._thread.join(timeout=5.0)
        for fd in (self._fd, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fd = self._wake_r = self._wake_w = -1
