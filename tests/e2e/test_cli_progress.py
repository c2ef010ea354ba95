"""`kgrader run` without a terminal: one progress line per step on stderr, each as the step
happens (read with its time of arrival; on a pty, the live line), the report alone on stdout, and ``--backend auto`` on the embedded default (bubblewrap) even where a
docker image is ready. Real bubblewrap, torch and Triton (CPU interpreter)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "examples" / "vector_add_small"

pytestmark = pytest.mark.bwrap


def test_piped_run_prints_a_line_per_step_and_auto_is_bubblewrap() -> None:
    p = subprocess.run([sys.executable, "-m", "grader.cli", "run", str(SMALL),
                        str(SMALL / "candidates" / "good.py"), "--device", "cpu", "--json"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads(p.stdout)  # stdout is the report alone: progress never lands there
    assert report["sandbox"]["backend"] == "bwrap"
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("kgrader run: ")]
    steps = [re.sub(r"^kgrader run: \+[0-9.]+s ", "", ln).split(" ")[0] for ln in lines]
    assert steps[:2] == ["scan", "sandbox"], p.stderr
    assert "backend=bwrap" in lines[1] and "chosen=auto" in lines[1], lines[1]
    judge = [ln for ln in lines if "judge:" in ln]
    for what in ("judge ready", "compile", "correctness", "timing"):
        assert any(f"judge: {what} s=" in ln for ln in judge), (what, judge)
    assert steps[-1] == "done" and "ok=true" in lines[-1]
    times = [float(re.match(r"^kgrader run: \+([0-9.]+)s", ln).group(1)) for ln in lines]  # type: ignore[union-attr]
    assert times == sorted(times)


def test_no_progress_keeps_stderr_free_of_steps() -> None:
    p = subprocess.run([sys.executable, "-m", "grader.cli", "run", str(SMALL),
                        str(SMALL / "candidates" / "broken.py"), "--backend", "bwrap",
                        "--device", "cpu", "--no-progress"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 1 and "kgrader run:" not in p.stderr, p.stderr
    assert "FAIL" in p.stdout and "(line 10)" in p.stdout


def _timed_lines(fd: int, sink: list[tuple[float, bytes]]) -> None:
    """Read ``fd`` until it closes, each chunk with the monotonic time it arrived."""
    import os

    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # a pty's master reads EIO once the child's side is closed
            return
        if not chunk:
            return
        sink.append((time.monotonic(), chunk))


def _first(chunks: list[tuple[float, bytes]], text: bytes) -> float:
    """When ``text`` had first arrived (the chunks joined: a line may span two reads)."""
    data = b""
    for t, chunk in chunks:
        data += chunk
        if text in data:
            return t
    raise AssertionError(f"{text!r} never arrived: {data[-3000:]!r}")


def test_piped_steps_arrive_as_the_judge_works() -> None:
    """Each judge step's line reaches the pipe when the step happens: compile's end well
    before the run ends (timing alone takes seconds on the CPU), in order."""
    p = subprocess.Popen([sys.executable, "-m", "grader.cli", "run", str(SMALL),
                          str(SMALL / "candidates" / "good.py"), "--device", "cpu", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert p.stderr is not None and p.stdout is not None
    chunks: list[tuple[float, bytes]] = []
    reader = threading.Thread(target=_timed_lines, args=(p.stderr.fileno(), chunks))
    reader.start()
    out = p.stdout.read()
    assert p.wait(timeout=600) == 0
    ended = time.monotonic()
    reader.join(10)
    report = json.loads(out)
    assert report["ok"] is True
    ready = _first(chunks, b"judge: judge ready s=")
    compiled = _first(chunks, b"judge: compile s=")
    timing = _first(chunks, b"judge: timing running")
    timed = _first(chunks, b"judge: timing s=")
    done = _first(chunks, b" done ok=true")
    assert ready <= compiled <= timing < timed <= done <= ended
    # Not all at once when the sandbox exits: compile's line came before the stages after
    # it ran (most of their time, by the judge's own phases).
    phases = report["sandbox"]["phases"]
    after = phases["correctness"] + phases["benchmark"]
    assert done - compiled > 0.8 * after, (compiled, done, after)
    assert timed - timing > 0.5, (timing, timed)  # "running" told when timing began
    text = b"".join(c for _, c in chunks).decode()
    assert text.count("judge: compile s=") == 1  # told live, not again from the record
    assert "judge: teardown s=" in text  # the host's own step, after the sandbox


def test_terminal_line_shows_each_step_as_it_happens() -> None:
    """On a terminal (a pty as stderr) the live line names the judge's step while it runs."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "200"}
    env.pop("NO_COLOR", None)
    p = subprocess.Popen([sys.executable, "-m", "grader.cli", "run", str(SMALL),
                          str(SMALL / "candidates" / "good.py"), "--device", "cpu", "--json"],
                         stdout=subprocess.PIPE, stderr=slave, cwd=ROOT, env=env)
    os.close(slave)
    assert p.stdout is not None
    chunks: list[tuple[float, bytes]] = []
    reader = threading.Thread(target=_timed_lines, args=(master, chunks))
    reader.start()
    out = p.stdout.read()
    assert p.wait(timeout=600) == 0
    ended = time.monotonic()
    reader.join(10)
    os.close(master)
    assert json.loads(out)["ok"] is True
    compiling = _first(chunks, b"judge: compile running")
    timing = _first(chunks, b"judge: timing running")
    assert compiling < timing < ended - 0.5, (compiling, timing, ended)
    assert b"kgrader run: +" not in b"".join(c for _, c in chunks)  # the live line, not lines
