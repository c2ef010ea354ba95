"""The verdict never rests on bytes the sandbox controls: result files that are huge,
forged, planted as links or FIFOs, a judge killed by its runner, and parallel runs."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.backends.base import RESULT_NAME, SandboxOutcome
from grader.evaluate import collect
from grader.judgecall import Staged
from grader.limits import Limits
from grader.report.model import Report
from grader.report.record import ResultProblem, read_result
from grader.task import load_task

from ._support import BROKEN, GOOD, TASK, WRONG, Host, backend_object, describe

PASSING_PAYLOAD = json.dumps(
    {
        "stage": "benchmark",
        "errors": [],
        "warnings": [],
        "device": "cpu",
        "environment": {},
        "correctness": {"passed": True, "checks": 6, "seeds": 2},
    },
    sort_keys=True,
    separators=(",", ":"),
)


def _collect(host: Host, outcome: SandboxOutcome, out_dir: Path, key: bytes) -> Report:
    """Feed a backend outcome and its /kg/out through the pipeline's own collector."""
    spec, _ = load_task(TASK)
    limits = spec.limits
    report = Report(ok=False, stage="sandbox", task=spec.name)
    staged = Staged(root=out_dir.parent, in_dir=out_dir.parent / "in", out_dir=out_dir, key=key)
    return collect(report, spec, backend_object(host.backend), outcome, staged, limits)


def test_giant_result_file_is_rejected_as_sandbox_error(host: Host) -> None:
    cap = Limits().result_bytes
    code = f"""
import json
body = json.dumps({{"payload": "x" * {cap * 3}, "mac": "0" * 64}})
open("/kg/out/{RESULT_NAME}", "w").write(body)
"""
    outcome, out_dir = host.run_argv(code, tmpfs_mib=64)
    assert outcome.exit_code == 0 and outcome.limit_fired is None, outcome
    assert (out_dir / RESULT_NAME).stat().st_size > cap
    with pytest.raises(ResultProblem) as exc:
        read_result(out_dir / RESULT_NAME, secrets.token_bytes(32), cap)
    assert exc.value.code == "result_too_large" and not exc.value.authentic
    report = _collect(host, outcome, out_dir, secrets.token_bytes(32))
    assert not report.ok
    assert [(e.stage, e.code) for e in report.errors] == [("integrity", "result_too_large")]
    host.assert_unharmed()


def test_forged_small_result_is_rejected_as_result_forged(host: Host) -> None:
    mac = hmac.new(b"\0" * 32, PASSING_PAYLOAD.encode(), hashlib.sha256).hexdigest()
    record = json.dumps({"payload": PASSING_PAYLOAD, "mac": mac})
    outcome, out_dir = host.run_argv(f"open('/kg/out/{RESULT_NAME}', 'w').write({record!r})")
    assert outcome.exit_code == 0, outcome
    report = _collect(host, outcome, out_dir, secrets.token_bytes(32))
    assert not report.ok
    assert [(e.stage, e.code) for e in report.errors] == [("integrity", "result_forged")]
    host.assert_unharmed()


@pytest.mark.parametrize("plant", ["symlink", "fifo"])
def test_planted_result_link_or_fifo_is_not_followed(host: Host, plant: str) -> None:
    target = str(host.sentinel.path)  # a host path the sandbox cannot see, but the host can
    code = (
        f"import os; os.symlink({target!r}, '/kg/out/{RESULT_NAME}')"
        if plant == "symlink"
        else f"import os; os.mkfifo('/kg/out/{RESULT_NAME}')"
    )
    outcome, out_dir = host.run_argv(code)
    assert outcome.exit_code == 0, outcome
    t0 = time.monotonic()
    report = _collect(host, outcome, out_dir, secrets.token_bytes(32))
    assert time.monotonic() - t0 < 10, "reading a planted FIFO blocked the host"
    assert not report.ok
    assert [(e.stage, e.code) for e in report.errors] == [("integrity", "result_unreadable")]
    host.assert_unharmed()


def test_runner_cannot_kill_its_judge(host: Host) -> None:
    # The runner has a uid of its own and a seccomp filter: the kill is refused, the
    # candidate's import fails, and the judge lives to report it. (How a judge that does die
    # without a record is reported, stage integrity and code judge_died, is tested in
    # tests/unit/test_wire.py.)
    report = host.evaluate("kill_judge")
    assert not report.ok, describe(report)
    e = report.errors[0]
    assert (e.stage, e.code, e.origin) == ("compile", "exception", "candidate"), describe(report)
    assert "PermissionError" in e.message, describe(report)
    assert report.correctness is None
    host.assert_unharmed()


@pytest.mark.parametrize(
    ("candidate", "codes"),
    [
        # /kg/out belongs to the judge's uid: a runner's write is refused at import
        # (PermissionError), which is the first line of defence; the record's MAC the second.
        ("forge_result_then_wrong", {"wrong_values", "out_tampered", "import", "exception"}),
        ("forge_result_then_kill_judge", {"result_forged", "import", "exception"}),
        ("forge_result_block_judge", {"out_tampered", "result_forged", "judge_died",
                                      "result_unreadable", "import", "exception"}),
    ],
)
def test_candidate_forging_result_file_does_not_pass(
    host: Host, candidate: str, codes: set[str]
) -> None:
    report = host.evaluate(candidate)
    assert not report.ok, describe(report)
    assert report.errors and report.errors[0].code in codes, describe(report)
    if report.errors[0].code in ("import", "exception"):
        assert "PermissionError" in report.errors[0].message, describe(report)
    assert not (
        report.correctness
        and report.correctness.passed
        and report.correctness.checks == 6
        and report.stage == "benchmark"
    ), "the forged record was believed"
    host.assert_unharmed()


def test_eight_parallel_evaluations_get_their_own_verdicts(host: Host) -> None:
    mix = [GOOD, WRONG, GOOD, BROKEN, WRONG, GOOD, WRONG, GOOD]
    expect = {GOOD: None, WRONG: ("correctness", "wrong_values"), BROKEN: ("compile", "import")}
    with ThreadPoolExecutor(max_workers=len(mix)) as pool:
        reports = list(
            pool.map(lambda c: host.evaluate(c, limits={"compile_s": 300, "run_s": 300}), mix)
        )
    for cand, report in zip(mix, reports, strict=True):
        assert report.candidate is not None
        assert report.candidate.sha256 == hashlib.sha256(cand.read_bytes()).hexdigest()
        want = expect[cand]
        if want is None:
            assert report.ok and not report.errors, (cand.name, describe(report))
            assert report.correctness is not None and report.correctness.passed
        else:
            assert not report.ok, (cand.name, describe(report))
            assert (report.errors[0].stage, report.errors[0].code) == want, (
                cand.name,
                describe(report),
            )
    host.assert_unharmed()
