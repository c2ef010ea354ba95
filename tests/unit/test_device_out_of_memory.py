"""A device that ran out of memory in the judge or the problem process is the
infrastructure's ``device_out_of_memory``, one line with the figures, never a traceback and
never ``judge_error`` (sandbox/contract/device_memory.py). On the CPU there is no device: the
exceptions are the ones torch and the launcher raise, made here; the judge's and the problem
process's real code paths classify them. The H200 run: bench/gpu_shared.sh."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from grader.backends.base import SandboxOutcome
from grader.grading.shared_device import account_for_shared_device
from grader.report.model import Report, ReportError
from grader.task import load_task
from sandbox.contract import codes, device_memory, wire
from sandbox.contract.device_memory import Figures
from sandbox.contract.failure import StageFailure
from sandbox.judge import run as judge_run
from sandbox.judge.taint import Taint
from sandbox.launcher import protocol
from sandbox.launcher.gpu_share import GpuShareError
from sandbox.problem import serve
from sandbox.problem.handle import ProblemError
from sandbox.problem.host import RemoteProblem

ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30
# torch 2.x's message for a full device (the form of the H200's `compare` failure)
TORCH_OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
             "139.81 GiB of which 1.19 GiB is free. Process 4242 has 120.00 GiB memory in use.")


def _torch_oom() -> BaseException:
    return torch.OutOfMemoryError(TORCH_OOM)


@pytest.mark.parametrize("exc", [
    _torch_oom(),
    GpuShareError("cuMemCreate failed with CUresult 2 (2097152 bytes asked)", 2, 2 << 20),
    RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
    RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
])
def test_every_form_of_a_full_device_is_recognised(exc: BaseException) -> None:
    assert device_memory.is_device_oom(exc)
    try:  # and as the cause of whatever the judge's code wrapped it in
        raise ValueError("while building the reference") from exc
    except ValueError as wrapped:
        assert device_memory.is_device_oom(wrapped)


@pytest.mark.parametrize("exc", [
    RuntimeError("CUDA error: an illegal memory access was encountered"),
    GpuShareError("cuMemMap failed with CUresult 1", 1),
    GpuShareError("cuMemCreate failed with CUresult 201", 201, 1 << 20),
    MemoryError(),  # the host's memory: the sandbox's memory limit, not the device
    type("OutOfResources", (Exception,), {})("out of resource: shared memory"),  # Triton's
    KeyError("out of memory"),
])
def test_other_failures_are_not_a_full_device(exc: BaseException) -> None:
    assert not device_memory.is_device_oom(exc)


def test_the_size_asked_comes_from_the_exception() -> None:
    assert device_memory.asked_bytes(_torch_oom()) == 2 * GiB
    assert device_memory.asked_bytes(RuntimeError("Tried to allocate 20.00 MiB")) == 20 << 20
    assert device_memory.asked_bytes(GpuShareError("x", 2, 3 << 21)) == 3 << 21
    assert device_memory.asked_bytes(RuntimeError("CUDA error: out of memory")) is None


def test_the_failure_is_one_line_with_what_was_asked_free_and_held() -> None:
    fig = Figures(free=1 * GiB, total=140 * GiB, holders={"pid 10": 2 * GiB, "pid 11": GiB})
    err = device_memory.failure("correctness", "the judge (correctness stage)", _torch_oom(), fig).error
    assert (err.stage, err.code, err.origin) == ("correctness", "device_out_of_memory", "infrastructure")
    assert "\n" not in err.message and "Traceback" not in err.message
    for part in ("asked 2.00 GiB", "1.00 GiB free of 140.00 GiB", "pid 10 2.00 GiB",
                 "136.00 GiB held outside this sandbox"):
        assert part in err.message, err.message
    assert err.detail["asked_bytes"] == 2 * GiB and err.detail["outside_bytes"] == 136 * GiB
    # without its own processes' figures the sandbox cannot tell what is outside it
    alone = device_memory.describe("x", None, Figures(free=GiB, total=140 * GiB))
    assert "outside" not in alone and "asked ?" in alone


def test_the_code_is_catalogued_as_the_infrastructures_in_every_run_stage() -> None:
    entry = codes.lookup("device_out_of_memory")
    assert entry.origins == ("infrastructure",) and "report" in entry.where
    assert {"sandbox", "compile", "correctness", "benchmark", "accept"} <= set(entry.stages)
    # the host re-queues a report whose error is the infrastructure's (grader.service.worker)
    r = Report(ok=False, stage="correctness", errors=[ReportError(
        stage="correctness", code="device_out_of_memory", origin="infrastructure", message="m")])
    assert r.infrastructure_failed()


def test_the_judges_own_failure_is_typed_when_the_device_is_full_and_a_bug_stays_a_bug() -> None:
    oom = judge_run._infra("judge_error", _torch_oom(), "cpu", "correctness")
    assert (oom.code, oom.origin, oom.stage) == ("device_out_of_memory", "infrastructure", "correctness")
    assert "Traceback" not in oom.message and "asked 2.00 GiB" in oom.message
    try:
        _ = 1 / 0
    except ZeroDivisionError as e:
        bug = judge_run._infra("judge_error", e)
    assert bug.code == "judge_error" and "Traceback" in bug.message


def _request() -> wire.JudgeRequest:
    spec, ref = load_task(ROOT / "examples" / "vector_add")
    return wire.JudgeRequest(wire_version=wire.WIRE_VERSION, key="00" * 32, mode="evaluate",
                             device="cpu", limits=wire.LimitsWire(10.0, 20.0, None), phase_seed=7,
                             task=spec.to_wire(), reference=ref, candidate="/kg/in/c.py")


@pytest.mark.parametrize("when", ["setup", "stage"])
def test_run_mode_records_a_full_device_in_setup_and_in_a_stage(
        monkeypatch: pytest.MonkeyPatch, when: str) -> None:
    """The judge's set-up (its shared buffers: cuMemCreate) and its stages (the compare's
    temporaries) through the judge's own dispatch, the evaluation faked."""
    from sandbox.judge import evaluation

    class Ev:
        def __init__(self, req: wire.JudgeRequest) -> None:
            if when == "setup":
                raise GpuShareError("cuMemCreate failed with CUresult 2 (1073741824 bytes asked)",
                                    2, GiB)
            self.dev, self.stage, self.nvml_handle = "cpu", "correctness", None
            self.errors: list[wire.ErrorWire] = []
            self.phases: dict[str, float] = {}
            self.taint = Taint([], self.phases)  # the judge's real taint mark

        def phase(self, name: str, t0: float) -> None:
            pass

        def shutdown(self) -> None:
            pass

        def record(self) -> wire.Record:
            return wire.Record(wire_version=wire.WIRE_VERSION, stage=self.stage,
                               errors=tuple(self.errors), warnings=(), device="cpu", environment={})

    def stages(ev: Any) -> None:
        raise _torch_oom()

    monkeypatch.setattr(evaluation, "Evaluation", Ev)
    monkeypatch.setattr(judge_run, "_evaluate", stages)
    rec = judge_run.run_mode(_request(), (0.0, 0.0))
    (err,) = rec.errors
    assert (err.code, err.origin) == ("device_out_of_memory", "infrastructure")
    assert "Traceback" not in err.message and "\n" not in err.message
    assert ("asked 1.00 GiB" if when == "setup" else "asked 2.00 GiB") in err.message


def test_the_problem_process_answers_a_full_device_with_the_code_and_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The problem process's real serve loop, over real pipes: its reference ran out."""
    to_srv, from_judge = os.pipe()
    to_judge, from_srv = os.pipe()
    srv = serve.Server(to_srv, from_srv, -1, "cpu")

    def reference(msg: dict[str, Any]) -> dict[str, Any]:
        raise _torch_oom()

    monkeypatch.setattr(srv, "reference", reference)
    t = threading.Thread(target=srv.serve, daemon=True)
    t.start()
    try:
        protocol.send_json(from_judge, {"op": "reference"})
        reply = protocol.recv_json(to_judge, 10.0, 1 << 20)
        protocol.send_json(from_judge, {"op": "exit"})
        t.join(10)
    finally:
        for fd in (to_srv, from_judge, to_judge, from_srv):
            os.close(fd)
    assert reply["ok"] is False
    assert reply["error"]["code"] == "device_out_of_memory"
    msg = reply["error"]["message"]
    assert "Traceback" not in msg and "\n" not in msg and "asked 2.00 GiB" in msg
    assert "the problem process (reference)" in msg


@pytest.mark.parametrize("op", ["reference", "verify"])
def test_the_judge_keeps_the_problem_processes_code_as_the_infrastructures(
        op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also while checking a side's outputs: a full device is no verdict on them."""
    prob: Any = RemoteProblem.__new__(RemoteProblem)

    def request(msg: dict[str, Any], timeout: float, fds: Any = None) -> dict[str, Any]:
        raise ProblemError("device_out_of_memory", "the GPU ran out of memory in the problem "
                           "process (reference): asked 2.00 GiB, 0.10 GiB free of 139.81 GiB")

    prob.handle = SimpleNamespace(request=request)
    prob._checker, prob._by_slots, prob.dev = True, {}, "cpu"
    with pytest.raises(StageFailure) as e:
        if op == "reference":
            prob._request("reference", {"op": "reference"})
        else:
            from sandbox.problem import host

            monkeypatch.setattr(host, "total_bytes", lambda slots: 8)
            lay = host._Layout({"n": 1}, [], None)
            prob._by_slots = {(): lay}
            prob._ensure = lambda n: torch.zeros(8, dtype=torch.uint8)
            prob.verify([], {}, {})
    err = e.value.error
    assert (err.code, err.origin) == ("device_out_of_memory", "infrastructure")
    assert "asked 2.00 GiB" in err.message


def test_the_host_names_the_other_jobs_holding_the_device() -> None:
    r = Report(ok=False, stage="correctness", errors=[ReportError(
        stage="correctness", code="device_out_of_memory", origin="infrastructure",
        message="the GPU ran out of memory in the judge: asked 2.00 GiB, 0.10 GiB free")])
    out = SandboxOutcome(backend="bwrap", exit_code=0, signal=None, wall_s=1.0,
                         device_shared_by=("pid 4242 (python3, 120.00 GiB)",), device_watched=True)
    account_for_shared_device(r, out)
    (e,) = r.errors
    assert e.code == "device_out_of_memory" and "pid 4242 (python3, 120.00 GiB)" in e.message
    assert e.detail["other_jobs"] == ["pid 4242 (python3, 120.00 GiB)"]


@pytest.mark.parametrize(("code", "message", "want"), [
    ("gpu_memory_limit", "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB.",
     "device_out_of_memory"),
    ("exception", "RuntimeError: CUDA error: out of memory", "device_out_of_memory"),
    ("exception", "RuntimeError: CUDA driver initialization failed", "runner_setup_failed"),
])
def test_a_runner_whose_setup_finds_the_device_full_is_the_devices_fault(
        monkeypatch: pytest.MonkeyPatch, code: str, message: str, want: str) -> None:
    """Before the candidate is loaded a runner is the harness's: its CUDA context or its
    buffers not fitting is a full device (the judge's own figures), not the candidate's."""
    from sandbox.judge import sides
    from sandbox.launcher.proc import RunnerFailure

    class FakeSide:
        def __init__(self, *a: Any, **kw: Any) -> None:
            pass

        def await_setup(self, wait: float) -> None:
            raise RunnerFailure(code, message)

    monkeypatch.setattr(sides, "Side", FakeSide)
    monkeypatch.setattr(sides.prestart, "take", lambda path: None)
    ev: Any = SimpleNamespace(
        dev="cpu", nbytes=64, nvml_handle=None, sides=[], compile_deadline=0.0,
        left=lambda deadline: 5.0, trusted=lambda p: True,
        task=SimpleNamespace(entrypoint="launch", benchmark=None, audit_ops=False),
        req=SimpleNamespace(limits=SimpleNamespace(gpu_memory_mib=None, compile_s=10.0)),
        problem=SimpleNamespace(runner_setup=dict))
    with pytest.raises(StageFailure) as e:
        sides.open_sides(ev, [("/kg/in/c.py", ())], "compile")
    assert (e.value.error.code, e.value.error.origin) == (want, "infrastructure")
    if want == "device_out_of_memory":
        assert "a runner's set-up" in e.value.error.message and "\n" not in e.value.error.message
