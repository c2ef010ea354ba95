"""A sandbox that sat at its memory limit without being killed says so when its time ran out
(grader/backends/cgroups.py, grader/grading/summary.py)."""

from __future__ import annotations

from pathlib import Path

from grader.backends.base import SandboxOutcome
from grader.backends.cgroups import CgroupSet
from grader.grading.summary import _error
from sandbox.contract import wire


def test_memory_events_max_is_counted(tmp_path: Path) -> None:
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 412\noom 0\noom_kill 0\n")
    cg = CgroupSet(2, {"memory": tmp_path, "pids": tmp_path})
    assert cg.memory_limit_hits() == 412 and not cg.oom_killed()
    (tmp_path / "memory.events").unlink()
    assert cg.memory_limit_hits() == 0  # unreadable: no claim


def _outcome(hits: int) -> SandboxOutcome:
    return SandboxOutcome(backend="bwrap", exit_code=0, signal=None, wall_s=200.0,
                          memory_limit_hits=hits)


def test_a_compile_timeout_under_memory_pressure_names_the_limit() -> None:
    e = wire.ErrorWire(stage="compile", code="compile_timeout", origin="candidate",
                       message="no answer within 600 s", line=None, detail={})
    r = _error(e, _outcome(412))
    assert r.code == "compile_timeout" and "memory limit 412 times" in r.message
    assert "limits.memory_mib" in r.message and r.detail["memory_limit_hits"] == 412
    assert _error(e, _outcome(0)).message == "no answer within 600 s"


def test_other_failures_are_not_blamed_on_memory() -> None:
    e = wire.ErrorWire(stage="correctness", code="wrong_values", origin="candidate",
                       message="out wrong", line=None, detail={})
    assert _error(e, _outcome(9)).message == "out wrong"
