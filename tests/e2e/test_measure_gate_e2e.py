"""A gated evaluation in a real sandbox: it waits while another holds the device, then
runs to a normal verdict. bwrap prepares meanwhile (its phases show the wait); docker
takes its turn before the container starts."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from grader.backends.gate import MeasureGate
from grader.evaluate import EvalRequest, evaluate
from grader.report.model import Report

from ._backends import backend_or_skip

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "examples" / "vector_add_small"
HOLD_S = 8.0


def _gated(backend: str, hold_s: float) -> tuple[Report, float, MeasureGate]:
    """One evaluation started while the device's gate is held for ``hold_s``: its report,
    the seconds it took, the gate."""
    gate = MeasureGate("test")
    req = EvalRequest.from_paths(SMALL, SMALL / "candidates" / "good.py",
                                 backend=backend_or_skip(backend), device="cpu", gate=gate)
    reports: list[Report] = []
    with gate.held():
        th = threading.Thread(target=lambda: reports.append(evaluate(req)))
        t0 = time.monotonic()
        th.start()
        time.sleep(hold_s)  # bwrap: the judge imports torch in ~1-3 s, then blocks at the gate
        assert th.is_alive() and not reports
    th.join(600)
    return reports[0], time.monotonic() - t0, gate


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_a_gated_evaluation_waits_for_the_device_then_passes(backend: str) -> None:
    # Beside two evaluations per core a bwrap judge once took longer than the 8 s hold to
    # reach the gate (gate_wait 0.0001 s): nothing to see then, so hold longer and look again.
    for hold_s in (HOLD_S, 4 * HOLD_S, 12 * HOLD_S):
        r, took, gate = _gated(backend, hold_s)
        ph = r.sandbox.phases if r.sandbox is not None else {}
        if backend != "bwrap" or ph.get("gate_wait", 0.0) > 2.0 or not r.ok:
            break
    assert r.ok and not r.errors, r.model_dump_json()
    assert r.sandbox is not None and r.sandbox.exit_code == 0
    phases = r.sandbox.phases
    assert phases["total"] >= hold_s and took >= hold_s
    assert gate.grants == 1
    if backend == "bwrap":
        assert phases["gate_wait"] > 2.0, phases
        # judge_ready counts the judge's own work only; a runner's ready counts from its start
        assert phases["judge_ready"] < phases["total"] - phases["gate_wait"]
        assert phases["runner1_ready"] > phases["gate_wait"]
    else:  # the grant was written before the container started: nothing left to wait for
        assert phases.get("gate_wait", 0.0) < 1.0, phases
