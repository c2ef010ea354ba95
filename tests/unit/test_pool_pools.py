"""Pools.grade: which requests go to which pool, and when the cold path grades instead.

Scheduling only: Pool and the cold evaluate are stand-ins here (the real ones run in
tests/e2e/test_pool_e2e.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from grader.errors import InfrastructureError, UsageError
from grader.evaluate import EvalRequest
from grader.pool import pools as pools_mod
from grader.pool.pools import Pools

TASK = Path(__file__).resolve().parents[2] / "examples" / "vector_add_small"


class _Pool:
    made: ClassVar[list[_Pool]] = []
    refuse = False  # the backend cannot pool (docker)
    busy = False  # no warm sandbox in time

    def __init__(self, req: EvalRequest, size: int, **kw: Any) -> None:
        if _Pool.refuse:
            raise UsageError("a warm pool needs the bwrap backend")
        self.req, self.gate, self.graded, self.closed = req, kw.get("gate"), 0, False
        _Pool.made.append(self)

    def evaluate(self, req: EvalRequest, timeout: float | None = None) -> Any:
        if _Pool.busy:
            raise InfrastructureError("no warm sandbox became ready")
        self.graded += 1
        return "warm"

    def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def _fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pools_mod, "Pool", _Pool)
    monkeypatch.setattr(pools_mod, "evaluate", lambda req: "cold")
    _Pool.made, _Pool.refuse, _Pool.busy = [], False, False


def _req(**kw: Any) -> EvalRequest:
    return EvalRequest.from_paths(TASK, TASK / "candidates" / "good.py",
                                  **{"backend": "bwrap", "device": "cpu", **kw})


def _grade(p: Pools, req: EvalRequest) -> object:
    return p.grade(req)  # the stand-ins answer "warm" or "cold", not a Report


def test_a_templates_first_request_is_cold_and_the_next_ones_warm() -> None:
    p = Pools(1)
    assert _grade(p, _req()) == "cold" and len(_Pool.made) == 1
    assert _grade(p, _req()) == "warm" and _grade(p, _req()) == "warm"
    assert _grade(p, _req(stages=("compile",))) == "cold" and len(_Pool.made) == 2
    assert p.cold == 2 and _Pool.made[0].graded == 2


def test_no_warm_sandbox_in_time_grades_cold() -> None:
    p = Pools(1)
    _grade(p, _req())
    _Pool.busy = True
    assert _grade(p, _req()) == "cold" and p.cold == 2


def test_a_backend_that_cannot_pool_is_not_retried() -> None:
    _Pool.refuse = True
    p = Pools(1)
    assert _grade(p, _req()) == "cold" and _grade(p, _req()) == "cold"
    _Pool.refuse = False
    assert _grade(p, _req()) == "cold" and _Pool.made == []  # remembered: no pool for it


def test_the_least_recently_used_template_is_closed_to_make_room() -> None:
    p = Pools(1, templates=2)
    a, b, c = _req(), _req(stages=("compile",)), _req(stages=("compile", "correctness"))
    _grade(p, a)
    _grade(p, b)
    _grade(p, a)  # a is now the most recent
    _grade(p, c)
    assert [x.closed for x in _Pool.made] == [False, True, False]
    p.close()
    assert all(x.closed for x in _Pool.made)


def test_each_gpu_set_has_one_gate_shared_by_its_templates_and_the_cpu_none() -> None:
    p = Pools(1)
    _grade(p, _req())
    _grade(p, _req(device="cuda", gpu_ids=("0",)))
    _grade(p, _req(device="cuda", gpu_ids=("0",), stages=("compile",)))
    _grade(p, _req(device="cuda", gpu_ids=("1",)))
    cpu, g0, g0b, g1 = (x.gate for x in _Pool.made)
    assert cpu is None and g0 is g0b and g0 is not None and g1 is not g0
