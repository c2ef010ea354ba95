"""Whole evaluations whose judge starts through ``sandbox.launcher.launch``: runners as principals.

The bwrap backend here is the real one: uid 0 with CAP_SETUID, CAP_SETGID and
CAP_SYS_ADMIN, then the launcher. The static scan is
off (tests/policies/runtime-only.toml), so only the runtime layers stop the attacks.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import grader.evaluate as ge
from grader.report.model import Report

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "vector_add_small"
GOOD = TASK / "candidates" / "good.py"
ATTACKS = ROOT / "tests" / "attacks" / "runtime"
RUNTIME_ONLY = str(ROOT / "tests" / "policies" / "runtime-only.toml")
LIMITS: dict[str, float | int | None] = {"compile_s": 60, "run_s": 60, "memory_mib": 1536}

pytestmark = [pytest.mark.bwrap,
              pytest.mark.skipif(os.geteuid() != 0, reason="the bwrap backend starts as root")]


def evaluate(monkeypatch: pytest.MonkeyPatch, candidate: Path, *, current: Path | None = None,
             stages: tuple[ge.StageName, ...] = ("compile", "correctness", "benchmark")) -> Report:
    return ge.evaluate(ge.EvalRequest.from_paths(TASK, candidate, current, backend="bwrap",
                                                 device="cpu", policy=RUNTIME_ONLY,
                                                 limits=dict(LIMITS), stages=stages))


def first(report: Report) -> tuple[str, str, str]:
    assert report.errors, report.model_dump_json(indent=1)
    e = report.errors[0]
    return e.stage, e.code, e.message


def test_good_candidate_passes_with_the_launcher_and_no_isolation_warning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    report = evaluate(monkeypatch, GOOD)
    assert report.ok and report.stage == "benchmark", report.model_dump_json(indent=1)
    assert not [w for w in report.warnings if w.startswith("isolation")], report.warnings


def test_runner_sees_itself_confined(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = Path(__file__).parent / "isolation_candidates" / "runner_confinement.py"
    report = evaluate(monkeypatch, probe, stages=("compile", "correctness"))
    assert report.ok, first(report)


def test_sigstop_helper_during_acceptance_is_rejected_as_runner_spawned_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    report = evaluate(monkeypatch, ATTACKS / "sigstop_other_runner.py", current=GOOD,
                      stages=("compile", "correctness"))
    assert not report.ok
    stage, code, message = first(report)
    assert (stage, code) == ("accept", "runner_spawned_process"), message
    assert "candidate.py" in message and "python" in message, message


def test_sigstop_helper_is_rejected_in_the_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    report = evaluate(monkeypatch, ATTACKS / "sigstop_other_runner.py")
    assert not report.ok
    assert first(report)[:2] == ("benchmark", "runner_spawned_process"), first(report)


def test_ptrace_and_process_vm_readv_on_the_judge_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    report = evaluate(monkeypatch, ATTACKS / "ptrace_judge.py", current=GOOD,
                      stages=("compile", "correctness"))
    assert not report.ok
    stage, code, message = first(report)
    assert (stage, code) == ("compile", "import"), message
    assert "ptrace ['Operation not permitted']" in message, message
    assert "process_vm_readv ['Operation not permitted']" in message, message


def test_killing_the_judge_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    report = evaluate(monkeypatch, ATTACKS / "kill_judge.py", stages=("compile",))
    assert not report.ok
    stage, code, message = first(report)
    assert (stage, code) == ("compile", "exception") and "PermissionError" in message, message

