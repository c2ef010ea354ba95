"""A gated evaluation in a real bwrap sandbox: it prepares, waits while another holds the
device, then runs to a normal verdict; its phases show the wait."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from grader.backends.gate import MeasureGate
from grader.evaluate import EvalRequest, evaluate
from grader.report.model import Report

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "examples" / "vector_add_small"

pytestmark = [pytest.mark.bwrap, pytest.mark.skipif(shutil.which("bwrap") is None,
                                                    reason="bubblewrap is not installed")]


def test_a_gated_evaluation_waits_for_the_device_then_passes() -> None:
    gate = MeasureGate("test")
    req = EvalRequest.from_paths(SMALL, SMALL / "candidates" / "good.py", backend="bwrap",
                                 device="cpu", gate=gate)
    reports: list[Report] = []
    with gate.held():
        th = threading.Thread(target=lambda: reports.append(evaluate(req)))
        t0 = time.monotonic()
        th.start()
        time.sleep(8.0)  # the judge imports torch in ~1-3 s, then blocks at the gate
        assert th.is_alive() and not reports
    th.join(120)
    r = reports[0]
    assert r.ok and not r.errors, r.model_dump_json()
    assert r.sandbox is not None and r.sandbox.exit_code == 0
    phases = r.sandbox.phases
    assert phases["gate_wait"] > 2.0, phases
    assert phases["total"] >= 8.0 and time.monotonic() - t0 >= 8.0
    # judge_ready counts the judge's own work only; a runner's ready counts from its start
    assert phases["judge_ready"] < phases["total"] - phases["gate_wait"]
    assert phases["runner1_ready"] > phases["gate_wait"]
    assert gate.grants == 1
