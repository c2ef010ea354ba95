"""sandbox/contract/wire.py: the one host<->judge contract, parsed strictly on both ends."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from grader.report.record import ResultProblem, read_result
from grader.task import load_task
from sandbox.contract import wire

ROOT = Path(__file__).resolve().parents[2]


def _request() -> wire.JudgeRequest:
    spec, ref = load_task(ROOT / "examples" / "softmax")
    return wire.JudgeRequest(wire_version=wire.WIRE_VERSION, key="00" * 32, mode="evaluate",
                             device="cpu", limits=wire.LimitsWire(10.0, 20.0, None), phase_seed=7,
                             task=spec.to_wire(), reference=ref, candidate="/kg/in/candidate.py")


def test_request_round_trips_with_every_task_default_resolved() -> None:
    req = _request()
    back = wire.request_from_json(wire.dumps(req))
    assert back == req
    assert back.task is not None
    # Defaults come from the host's task model, never restated in the sandbox.
    assert back.task.acceptance.looks == (25, 50, 100, 200)
    assert back.task.benchmark.samples > 0 and back.task.correctness.seeds


def test_request_with_another_wire_version_is_refused() -> None:
    raw = json.loads(wire.dumps(_request()))
    raw["wire_version"] = wire.WIRE_VERSION + 1
    with pytest.raises(wire.WireFormatError, match="out of step"):
        wire.request_from_json(json.dumps(raw))


@pytest.mark.parametrize("mutate", [
    lambda r: r.update(extra=1),
    lambda r: r["task"].update(entrypoint=3),
    lambda r: r["limits"].pop("run_s"),
    lambda r: r.update(mode="exec"),
    lambda r: r["task"]["correctness"].update(seeds=["1"]),
])
def test_request_that_breaks_the_contract_is_refused(mutate) -> None:  # type: ignore[no-untyped-def]
    raw = json.loads(wire.dumps(_request()))
    mutate(raw)
    with pytest.raises(wire.WireFormatError):
        wire.request_from_json(json.dumps(raw))


def _signed(tmp_path: Path, body: str, key: bytes) -> Path:
    import hashlib
    import hmac

    p = tmp_path / "result.json"
    p.write_text(json.dumps({"payload": body, "mac": hmac.new(key, body.encode(),
                                                               hashlib.sha256).hexdigest()}))
    return p


def test_record_errors_carry_their_origin(tmp_path: Path) -> None:
    key = b"k" * 32
    rec = wire.Record(wire_version=wire.WIRE_VERSION, stage="compile", device="cpu",
                      environment={}, warnings=(),
                      errors=(wire.ErrorWire(stage="compile", code="import", message="boom",
                                             origin="candidate", line=3),))
    got = read_result(_signed(tmp_path, wire.dumps(rec), key), key, 1 << 20)
    assert got == rec and got.errors[0].origin == "candidate"


def test_authentic_record_of_another_version_is_an_infrastructure_fault(tmp_path: Path) -> None:
    key = b"k" * 32
    raw = dataclasses.asdict(wire.Record(wire_version=wire.WIRE_VERSION, stage=None, errors=(),
                                         warnings=(), device="cpu", environment={}))
    raw["wire_version"] = 1
    with pytest.raises(ResultProblem) as info:
        read_result(_signed(tmp_path, json.dumps(raw), key), key, 1 << 20)
    assert info.value.code == "wire_mismatch" and info.value.authentic


def test_record_claiming_integrity_failures_for_the_host_is_refused(tmp_path: Path) -> None:
    key = b"k" * 32
    rec = wire.Record(wire_version=wire.WIRE_VERSION, stage="integrity", device="cpu",
                      environment={}, warnings=(),
                      errors=(wire.ErrorWire(stage="integrity", code="judge_died", message="x",
                                             origin="candidate"),))
    with pytest.raises(ResultProblem) as info:
        read_result(_signed(tmp_path, wire.dumps(rec), key), key, 1 << 20)
    assert info.value.code == "result_malformed"


def test_unsigned_record_is_a_candidate_forgery(tmp_path: Path) -> None:
    body = wire.dumps(wire.Record(wire_version=wire.WIRE_VERSION, stage=None, errors=(),
                                  warnings=(), device="cpu", environment={}))
    p = _signed(tmp_path, body, b"x" * 32)
    with pytest.raises(ResultProblem) as info:
        read_result(p, b"k" * 32, 1 << 20)
    assert info.value.code == "result_forged" and not info.value.authentic


def _outcome(**kw: object) -> object:
    from grader.backends.base import SandboxOutcome

    return SandboxOutcome(backend="bwrap", exit_code=kw.get("exit_code", 137),  # type: ignore[arg-type]
                          signal=None, wall_s=1.0, limit_fired=kw.get("limit_fired"))  # type: ignore[arg-type]


def test_judge_died_without_a_record_is_the_candidates_integrity_failure() -> None:
    from grader.grading.summary import no_record_error

    err = no_record_error(ResultProblem("result_missing", "no record"), _outcome())  # type: ignore[arg-type]
    assert (err.stage, err.code, err.origin) == ("integrity", "judge_died", "candidate")


def _killed(**kw: object) -> object:
    from grader.backends.base import SandboxOutcome

    fields: dict[str, object] = {"exit_code": None, "signal": 9, "oom_counted": True, **kw}
    return SandboxOutcome(backend="bwrap", wall_s=1.0, **fields)  # type: ignore[arg-type]


def test_judge_killed_by_a_sent_signal_with_no_limit_is_the_infrastructures() -> None:
    from grader.grading.summary import no_record_error

    for sig in (9, 15, 2, 1):
        err = no_record_error(ResultProblem("result_missing", "no record"), _killed(signal=sig))  # type: ignore[arg-type]
        assert (err.stage, err.code, err.origin) == ("sandbox", "judge_killed", "infrastructure")


def test_judge_killed_with_its_cgroup_removed_from_outside_is_the_infrastructures() -> None:
    """The OOM count went with the cgroup; only root on the host removes it."""
    from grader.grading.summary import no_record_error

    lost = _killed(oom_counted=False, cgroup_lost=True)
    err = no_record_error(ResultProblem("result_missing", "no record"), lost)  # type: ignore[arg-type]
    assert (err.code, err.origin) == ("judge_killed", "infrastructure")
    for kw in ({"signal": 11}, {"limit_fired": "memory_limit"}, {"timed_out": True}):
        other = _killed(oom_counted=False, cgroup_lost=True, **kw)
        assert no_record_error(ResultProblem("result_missing", "no record"),
                               other).code != "judge_killed"  # type: ignore[arg-type]


def test_docker_init_that_could_not_forward_a_stop_signal_is_the_infrastructures() -> None:
    from grader.backends.base import SandboxOutcome
    from grader.grading.summary import no_record_error

    tail = b"[FATAL tini (1)] Unexpected error when forwarding signal: 'Operation not permitted'\n"
    out = SandboxOutcome(backend="docker", exit_code=1, signal=None, wall_s=1.0, stderr=tail)
    err = no_record_error(ResultProblem("result_missing", "no record"), out)
    assert (err.code, err.origin) == ("judge_killed", "infrastructure")
    for other in (SandboxOutcome(backend="docker", exit_code=1, signal=None, wall_s=1.0),
                  SandboxOutcome(backend="bwrap", exit_code=1, signal=None, wall_s=1.0, stderr=tail)):
        assert no_record_error(ResultProblem("result_missing", "no record"), other).code == "judge_died"


def test_docker_judge_whose_tether_closed_is_the_infrastructures() -> None:
    from grader.backends.base import SandboxOutcome
    from grader.grading.summary import no_record_error

    out = SandboxOutcome(backend="docker", exit_code=wire.EXIT_HOST_GONE, signal=None, wall_s=1.0)
    err = no_record_error(ResultProblem("result_missing", "no record"), out)
    assert (err.code, err.origin) == ("judge_killed", "infrastructure")
    # bwrap sets no tether: the same status there is no proof of anything
    out = SandboxOutcome(backend="bwrap", exit_code=wire.EXIT_HOST_GONE, signal=None, wall_s=1.0)
    assert no_record_error(ResultProblem("result_missing", "no record"), out).code == "judge_died"


@pytest.mark.parametrize("kw", [
    {"oom_counted": False},  # an RSS watchdog only: a kernel OOM kill cannot be ruled out
    {"signal": 11}, {"signal": 6}, {"signal": 31},  # the judge's own fault, maybe provoked
    {"signal": None, "exit_code": 1},
    {"oom_killed": True}, {"pids_limited": True},
])
def test_judge_death_without_proof_of_an_outside_kill_stays_the_candidates(kw: dict[str, object]) -> None:
    from grader.grading.summary import no_record_error

    err = no_record_error(ResultProblem("result_missing", "no record"), _killed(**kw))  # type: ignore[arg-type]
    assert err.origin == "candidate" and err.code == "judge_died", err


def test_judge_died_while_a_limit_fired_is_that_limit() -> None:
    from grader.grading.summary import no_record_error

    err = no_record_error(ResultProblem("result_missing", "no record"),
                          _outcome(limit_fired="memory_limit"))  # type: ignore[arg-type]
    assert (err.code, err.origin) == ("memory_limit", "candidate")


def test_authentic_but_unreadable_record_is_infrastructure() -> None:
    from grader.grading.summary import no_record_error

    err = no_record_error(ResultProblem("result_malformed", "bad", authentic=True),
                          _outcome())  # type: ignore[arg-type]
    assert (err.stage, err.origin) == ("sandbox", "infrastructure")
