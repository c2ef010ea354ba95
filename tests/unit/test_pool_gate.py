"""A pool on a GPU given no gate makes one its sandboxes share; on the CPU it has none.

Without it, each warm sandbox would wait on a gate of its own: two evaluations of one pool
taken at once would measure on the device together. The backend and the refill are
stand-ins (no sandbox starts); the real pool runs in tests/e2e/test_pool_e2e.py.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from grader.backends.gate import MeasureGate
from grader.evaluate import EvalRequest
from grader.pool import pool as pool_mod

TASK = Path(__file__).resolve().parents[2] / "examples" / "vector_add_small"


@pytest.fixture(autouse=True)
def _no_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = types.SimpleNamespace(name="bwrap", capabilities=types.SimpleNamespace(warm_start=True))
    monkeypatch.setattr(pool_mod, "select_backend", lambda name, device: backend)
    monkeypatch.setattr(pool_mod.Pool, "_fill", lambda self: None)


def _pool(device: str, gate: MeasureGate | None = None) -> pool_mod.Pool:
    req = EvalRequest.from_paths(TASK, TASK / "candidates" / "good.py", backend="bwrap",
                                 device=device)
    return pool_mod.Pool(req, 2, gate=gate)


def test_a_gpu_pool_without_a_gate_makes_one_and_the_cpu_none() -> None:
    with _pool("cuda") as gpu, _pool("cuda") as other, _pool("cpu") as cpu:
        assert isinstance(gpu.gate, MeasureGate) and isinstance(other.gate, MeasureGate)
        assert gpu.gate is not other.gate  # each pool's own: share a device's by passing it
        assert cpu.gate is None


def test_a_gate_passed_in_is_the_one_used() -> None:
    shared = MeasureGate("gpu0")
    with _pool("cuda", shared) as a, _pool("cpu", shared) as b:
        assert a.gate is shared and b.gate is shared
