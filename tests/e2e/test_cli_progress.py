"""`kgrader run` without a terminal: one progress line per step on stderr, the report
alone on stdout, and ``--backend auto`` on the embedded default (bubblewrap) even where a
docker image is ready. Real bubblewrap, torch and Triton (CPU interpreter)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
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
