"""A runner dead of a SIGKILL the judge did not send is ``runner_killed`` (the infrastructure's),
unless the host cannot rule out the OOM killer or a limit (sandbox/launcher/proc.py,
grader/grading/summary.py).

The judge's side runs real child processes (killed by this test from outside, by the
handle itself, or crashing); only the uid-wide kill, which needs a runner uid, is replaced.
The host's side is pure logic on the backend's outcome.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from grader.backends.base import SandboxOutcome
from grader.grading.summary import _error
from sandbox.contract import codes, wire
from sandbox.launcher import identity, proc


def _handle(monkeypatch: pytest.MonkeyPatch, code: str, prefix: tuple[str, ...] = ()
            ) -> proc.RunnerHandle:
    """A RunnerHandle around a real child running ``code`` (no runner uid needed)."""
    monkeypatch.setattr(identity, "kill_all", lambda ident, timeout=10.0: None)
    h = proc.RunnerHandle.__new__(proc.RunnerHandle)
    h.proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    h.identity = None  # type: ignore[assignment]
    h.uid, h.prefix, h.answered, h.killed = 0, prefix, True, False
    return h


def test_a_sigkill_from_outside_is_runner_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    h = _handle(monkeypatch, "import time; time.sleep(60)")
    time.sleep(0.2)
    h.proc.send_signal(signal.SIGKILL)  # the test is outside the runner: an operator's kill
    f = h._death()
    assert (f.code, f.detail) == ("runner_killed", {"signal": 9})
    assert codes.origin_of(f.code) == "infrastructure"


def test_the_judges_own_kill_and_a_crash_stay_the_candidates_signal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = _handle(monkeypatch, "import time; time.sleep(60)")
    h.kill()  # the judge killed it (a timeout, an isolation failure), then asked again
    assert h._death().code == "signal"
    crash = _handle(monkeypatch, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert (crash._death().code, codes.origin_of("signal")) == ("signal", "candidate")


def test_a_runner_under_a_diagnostics_tool_is_not_vouched_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = _handle(monkeypatch, "import time; time.sleep(60)", prefix=("ncu",))
    time.sleep(0.2)
    h.proc.send_signal(signal.SIGKILL)  # the tool's process: the runner's filter is not on it
    assert h._death().code == "signal"


def _outcome(**kw: Any) -> SandboxOutcome:
    fields: dict[str, Any] = {"exit_code": 1, "signal": None, "oom_counted": True, **kw}
    return SandboxOutcome(backend="bwrap", wall_s=3.0, **fields)


def _killed(code: str = "runner_killed", stage: str = "benchmark") -> wire.ErrorWire:
    return wire.ErrorWire(stage=stage, code=code, origin="infrastructure",  # type: ignore[arg-type]
                          message="runner killed by SIGKILL that the judge did not send",
                          detail={"signal": 9})


@pytest.mark.parametrize("code", ["runner_killed", "current_runner_killed"])
def test_host_keeps_runner_killed_when_its_cgroup_counted_no_oom(code: str) -> None:
    for backend in ("bwrap", "docker"):
        r = _error(_killed(code), SandboxOutcome(backend=backend, exit_code=1, signal=None,
                                                 wall_s=3.0, oom_counted=True))
        assert (r.stage, r.code, r.origin) == ("benchmark", code, "infrastructure"), backend


def test_host_turns_it_into_memory_limit_when_the_oom_killer_fired() -> None:
    r = _error(_killed(), _outcome(oom_killed=True))
    assert (r.code, r.origin) == ("memory_limit", "candidate")
    assert "OOM" in r.message


def test_without_oom_accounting_it_stays_the_candidates_signal() -> None:
    """An RSS watchdog only (no memory cgroup): the OOM killer cannot be ruled out."""
    r = _error(_killed(stage="correctness"), _outcome(oom_counted=False))
    assert (r.stage, r.code, r.origin) == ("correctness", "signal", "candidate")
    assert "OOM killer cannot be ruled out" in r.message
    cur = _error(_killed("current_runner_killed"), _outcome(oom_counted=False))
    assert (cur.code, cur.origin) == ("current_signal", "candidate")


@pytest.mark.parametrize("kw", [{"limit_fired": "timeout", "timed_out": True},
                                {"limit_fired": "memory_limit"}, {"pids_limited": True}])
def test_a_limit_that_fired_beside_it_keeps_it_the_candidates(kw: dict[str, Any]) -> None:
    r = _error(_killed(), _outcome(**kw))
    assert r.origin == "candidate" and r.code in ("signal", "pids_limit"), r


def test_other_codes_are_untouched() -> None:
    e = wire.ErrorWire(stage="benchmark", code="signal", origin="candidate", message="SIGSEGV",
                       detail={"signal": 11})
    assert (_error(e, _outcome()).code, _error(e, _outcome()).origin) == ("signal", "candidate")


def test_a_report_with_runner_killed_is_retried_and_never_disqualifies() -> None:
    from grader.leaderboard.integrity import violation
    from grader.report.model import Report, ReportError

    r = Report(ok=False, stage="benchmark", errors=[ReportError(
        stage="benchmark", code="runner_killed", origin="infrastructure", message="m")])
    assert r.infrastructure_failed() and violation(r) is None
    assert "runner_killed" in codes.report_codes() and "current_runner_killed" in codes.report_codes()


def test_an_agents_lesson_says_a_runner_killed_is_not_the_kernels_fault() -> None:
    from grader.experience.extract import attempt_from_report
    from grader.experience.lessons import lesson
    from grader.report.model import Report, ReportError

    r = Report(ok=False, stage="benchmark", errors=[ReportError(
        stage="benchmark", code="runner_killed", origin="infrastructure", message="killed")])
    text = lesson(attempt_from_report(r, origin="run", task=None, source=None))
    assert text.startswith("infrastructure fault (runner_killed): not the kernel's fault"), text


def test_a_cgroup_removed_from_outside_keeps_it_runner_killed_as_for_the_judge() -> None:
    from grader.grading.summary import judge_killed_from_outside

    lost = _outcome(cgroup_lost=True, oom_counted=False, signal=9, exit_code=None)
    assert judge_killed_from_outside(lost)
    assert (_error(_killed(), lost).code, _error(_killed(), lost).origin) == (
        "runner_killed", "infrastructure")
    fired = _outcome(cgroup_lost=True, limit_fired="timeout", timed_out=True)
    assert _error(_killed(), fired).origin == "candidate"
