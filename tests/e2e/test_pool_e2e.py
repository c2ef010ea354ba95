"""The warm pool on bwrap: the same verdicts as a cold run, one evaluation per sandbox, a
pool that refills, and an expired sandbox that leaves nothing behind.

Real bwrap, torch and Triton (interpreted on the CPU); compile and correctness only, to
keep each evaluation short.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from grader.errors import InfrastructureError, UsageError
from grader.evaluate import EvalRequest, Source, evaluate
from grader.pool import Pool, WarmSandbox
from grader.report.model import Report

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "vector_add_small"
ATTACKS = ROOT / "tests" / "attacks" / "runtime"
RUNTIME_ONLY = str(ROOT / "tests" / "policies" / "runtime-only.toml")
LIMITS = {"compile_s": 60, "run_s": 60, "memory_mib": 2048}

pytestmark = pytest.mark.bwrap

CANDIDATES = {
    "good": TASK / "candidates" / "good.py",
    "wrong": TASK / "candidates" / "wrong.py",
    # a thread started at import: counted against the warm runner's pre-import threads
    "import_thread": ATTACKS / "import_thread_deferred.py",
    # writes a forged record into /kg/out and kills its parent: the judge's folder and uid
    "result_forgery": ATTACKS / "result_forgery.py",
}


def _request(candidate: Path) -> EvalRequest:
    return EvalRequest.from_paths(TASK, candidate, backend="bwrap", device="cpu",
                                  policy=RUNTIME_ONLY, limits=dict(LIMITS),
                                  stages=("compile", "correctness"))


def _verdict(r: Report) -> tuple[object, ...]:
    checks = r.correctness.checks if r.correctness is not None else None
    return (r.ok, r.stage, checks, [(e.stage, e.code, e.origin) for e in r.errors])


@pytest.fixture(scope="module")
def pool() -> Iterator[Pool]:
    with Pool(_request(CANDIDATES["good"]), size=1, refill_while_busy=False) as p:
        yield p


@pytest.mark.parametrize("name", sorted(CANDIDATES))
def test_a_warm_evaluation_gives_the_cold_verdict(pool: Pool, name: str) -> None:
    req = _request(CANDIDATES[name])
    cold = evaluate(req)
    warm = pool.evaluate(req)
    assert _verdict(warm) == _verdict(cold), (warm.model_dump_json(indent=1),
                                              cold.model_dump_json(indent=1))
    assert warm.sandbox is not None and "warm_idle" in warm.sandbox.phases
    if name == "good":
        assert warm.ok


def test_a_warm_sandbox_grades_one_evaluation_and_refuses_a_second(pool: Pool) -> None:
    sandbox = pool.take()
    req = _request(CANDIDATES["good"])
    assert sandbox.evaluate(req).ok
    with pytest.raises(UsageError, match="has been used"):
        sandbox.evaluate(req)
    assert not sandbox.staged.root.exists()


def test_the_pool_refills_after_each_take(pool: Pool) -> None:
    assert pool.wait_ready(1, timeout=300)
    started = pool.stats.started
    taken = pool.take()
    assert pool.ready_count() == 0
    taken.discard("unused by this test")  # killed without a grant, its folder removed
    assert pool.wait_ready(1, timeout=300)
    assert pool.stats.started == started + 1 and pool.ready_count() == 1
    assert taken.wait_ended(60) and not taken.staged.root.exists()


def test_a_request_of_another_template_is_refused(pool: Pool) -> None:
    other = _request(CANDIDATES["good"]).model_copy(update={"stages": ("compile",)})
    with pytest.raises(UsageError, match="template"):
        pool.evaluate(other)
    denied = pool.evaluate(_request(CANDIDATES["good"]).model_copy(update={
        "candidate": Source(name="bad.py", text="import os\nos.system('id')\n"), "policy": None}))
    assert not denied.ok and denied.stage == "scan"  # no warm sandbox spent on it


def _sandbox_processes(root: Path) -> list[psutil.Process]:
    """bwrap for this folder (its argv binds root/in) and everything under it."""
    for p in psutil.process_iter(["cmdline"]):
        argv = p.info["cmdline"] or [""]
        if "bwrap" in argv[0] and any(str(root) in a for a in argv):
            return [p, *p.children(recursive=True)]
    return []


def _status(p: psutil.Process) -> str:
    try:
        return str(p.status()) if p.is_running() else "gone"
    except psutil.NoSuchProcess:
        return "gone"


def test_an_expired_warm_sandbox_is_discarded_with_nothing_left() -> None:
    sandbox = WarmSandbox(_request(CANDIDATES["good"]), idle_s=2.0)
    deadline = time.monotonic() + 300
    while sandbox.turn.state == "starting" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sandbox.turn.ready_at is not None, sandbox.stderr_tail()
    procs = _sandbox_processes(sandbox.staged.root)
    assert len(procs) >= 4  # bwrap, the judge, its runner and its problem process at least
    bwrap_argv = procs[0].cmdline()
    # the scratch folder bound on /tmp ("--bind SCRATCH/tmp /tmp"; a checkout under /tmp also
    # has "--dir /tmp" before it, for its own ro-bind)
    scratch = next(Path(bwrap_argv[i + 1]).parent for i in range(len(bwrap_argv) - 2)
                   if bwrap_argv[i] == "--bind" and bwrap_argv[i + 2] == "/tmp")
    assert sandbox.wait_ended(60)
    assert "not used" in sandbox.turn.why
    left = [(p.pid, _status(p)) for p in procs if _status(p) not in ("gone", psutil.STATUS_ZOMBIE)]
    assert not left
    assert not sandbox.staged.root.exists() and not scratch.exists()
    with pytest.raises(InfrastructureError, match="not ready"):
        sandbox.evaluate(_request(CANDIDATES["good"]))


SIDE_ATTACK = ATTACKS / "read_other_side_source.py"
MARKED_CURRENT = Path(__file__).parent / "isolation_candidates" / "current_with_marker.py"
MARKER = "KGRADER-CURRENT-SECRET-5d41402abc4b2a76"


def test_sources_staged_into_a_warm_sandbox_are_each_sides_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/e2e/test_side_sources.py's acceptance run, warm: both runners started before
    any source existed, the sources staged at the grant. The attack reads neither the current
    best's source nor the judge's request."""
    keys: list[bytes] = []
    real = secrets.token_bytes

    def recorded(n: int | None = None) -> bytes:
        keys.append(real(n))
        return keys[-1]

    monkeypatch.setattr(secrets, "token_bytes", recorded)  # the HMAC keys judgecall makes
    req = EvalRequest.from_paths(TASK, SIDE_ATTACK, MARKED_CURRENT, backend="bwrap",
                                 device="cpu", policy=RUNTIME_ONLY,
                                 limits={"compile_s": 90, "run_s": 90, "memory_mib": 2048},
                                 stages=("compile", "correctness"))
    sandbox = WarmSandbox(req)
    report = sandbox.evaluate(req) if _ready(sandbox) else None
    assert report is not None, sandbox.stderr_tail()
    text = report.model_dump_json()
    assert MARKER not in text and keys and all(k.hex() not in text for k in keys), text
    first = report.errors[0]
    assert (first.stage, first.code, first.origin) == ("accept", "exception", "candidate"), text
    account = first.message
    assert "LEAK" not in account and "HIJACKED" not in account, account
    for refused in ("open /kg/in/current.py=EACCES", "list /kg/in=EACCES",
                    "list /kg/out=EACCES", "open /kg/out/.judge-secret.json=EACCES"):
        assert refused in account, (refused, account)


def _ready(sandbox: WarmSandbox, timeout: float = 300) -> bool:
    end = time.monotonic() + timeout
    while sandbox.turn.state == "starting" and time.monotonic() < end:
        time.sleep(0.1)
    return sandbox.turn.state == "ready"


def test_a_warm_evaluation_tells_its_steps_live_to_the_evaluating_thread(pool: Pool) -> None:
    """The judge's steps from the grant on reach the listeners of the thread that evaluates
    (not the pool's), each when it happens, while the evaluation is still running."""
    import threading

    from grader.logs import on_step

    seen: list[tuple[float, str, str]] = []
    with on_step(lambda name, fields: seen.append(
            (time.monotonic(), name, threading.current_thread().name))):
        report = pool.evaluate(_request(CANDIDATES["good"]))
    returned = time.monotonic()
    assert report.ok
    judge = [(t, name) for t, name, thread in seen if name.startswith("judge: ")]
    names = [name for _, name in judge]
    assert names == ["judge: judge ready", "judge: compile running", "judge: compile",
                     "judge: correctness running", "judge: correctness"], names
    assert all(thread.startswith("kgrader-progress-") for _, name, thread in seen
               if name.startswith("judge: "))
    compiled, checked = judge[2][0], judge[4][0]
    assert compiled < checked <= returned and checked - compiled > 0.1, judge
