"""Diagnostics on the CPU, end to end: real bubblewrap, real judge, Triton's interpreter.

There are no hardware counters and no memory checker on the CPU: every counter is
``null`` with the reason, the candidate is still built and run (a broken one still
fails), and ``--sanitize`` is a warning with the reason, never a failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import SANDBOX, kgrader_json

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "examples" / "vector_add_small"
GOOD = SMALL / "candidates" / "good.py"

pytestmark = pytest.mark.bwrap


def kgrader(*args: str | Path) -> tuple[int, dict[str, Any], str]:
    """``kgrader ARGS`` in the bwrap sandbox on the CPU, as JSON."""
    return kgrader_json(*args, *SANDBOX, timeout=600)


def test_profile_on_the_cpu_returns_nulls_with_reasons_and_exit_0() -> None:
    rc, r, _ = kgrader("profile", SMALL, GOOD)
    assert rc == 0 and r["ok"] is True and r["errors"] == [] and r["device"] == "cpu"
    d = r["diagnostics"]
    assert d["kernels"] == [] and d["advice"] == []
    assert "CPU" in d["unmeasured"]["kernels"] and "Nsight Compute" in d["unmeasured"]["kernels"]
    assert d["profile_overhead_s"] > 0  # the profile run's own cost is reported
    assert d["roofline_fraction"] is None and d["sanitizer"] is None


def test_profile_of_a_candidate_that_does_not_build_fails_with_exit_1(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text(GOOD.read_text().replace("BLOCK = 1024", "BLOCK = 1024 // 0", 1))
    rc, r, _ = kgrader("profile", SMALL, broken)
    assert rc == 1 and r["ok"] is False
    assert (r["errors"][0]["stage"], r["errors"][0]["code"]) == ("compile", "import")
    assert r["diagnostics"]["kernels"] == []


def test_sanitize_on_the_cpu_warns_and_grades_normally() -> None:
    rc, r, _ = kgrader("run", SMALL, GOOD, "--sanitize")
    assert rc == 0 and r["ok"] is True and r["correctness"]["passed"] is True
    assert r["timing"]["median_ms"] > 0  # timing still runs (never under the sanitizer)
    san = r["diagnostics"]["sanitizer"]
    assert san["tool"] == "memcheck" and san["ran"] is False and san["overhead_s"] is None
    assert "CPU" in san["unmeasured"]
    assert any(w.startswith("sanitize (memcheck): not run") for w in r["warnings"])


def test_profile_kernel_tool_on_the_cpu_gives_empty_advice_and_reasons(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.agent import tools

    monkeypatch.setenv("KGRADER_HARDWARE", str(tmp_path / "hardware.json"))
    ws = tools.init_workspace(tmp_path / "ws", SMALL, backend="bwrap", device="cpu",
                              quick_calibration=True)
    p = subprocess.run([sys.executable, "-m", "grader.cli", "profile", "-w", str(ws.root), str(GOOD)],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert "Traceback" not in p.stderr, p.stderr
    r = json.loads(p.stdout)
    if [e["code"] for e in r["errors"]] == ["work_escaped_timing"]:
        pytest.skip("a loaded host stole the CPU inside the timed region; not the diagnostics' concern")
    assert p.returncode == 0 and r["ok"] is True and r["advice"] == []
    assert r["diagnostics"]["kernels"] == [] and "CPU" in r["diagnostics"]["unmeasured"]["kernels"]
    assert r["registers_per_thread"] is None and "CPU" in r["unmeasured"]["registers_per_thread"]
    assert r["roofline_fraction"] is not None  # the roofline itself still works on the CPU
