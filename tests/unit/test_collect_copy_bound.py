"""The returned-output copy's bound on the CPU (sandbox.judge.outputs.collect_outputs): a copy
that was slow because the runner waited for a core passes; one during which the runner
computed fails as work deferred into the copy. The runner here is this test process, whose
CPU time the kernel accounts like a runner's."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from sandbox.contract.failure import StageFailure
from sandbox.judge.outputs import collect_outputs, runner_cpu_ms


def _fixture(copy: Any) -> tuple[Any, Any, list[Any]]:
    out = torch.zeros(256, dtype=torch.int64)
    slot: Any = SimpleNamespace(role="output", name="out", wire=lambda: {"name": "out"})
    side = SimpleNamespace(runner=SimpleNamespace(proc=SimpleNamespace(pid=os.getpid()),
                                                  request=lambda msg, timeout: copy()),
                           views=lambda outs, buf: {"out": out},
                           prefix=(), base_caught=-1)  # not under the idle watch (test_idle's)
    ev = SimpleNamespace(dev="cpu", left=lambda deadline: 10.0,
                         noop=lambda side, stage: (1.0, 0.5, 0.0, (0.0, 0.0)))
    return ev, side, [slot]


def _spin_cpu(ms: float) -> None:
    end = time.process_time() + ms / 1e3
    while time.process_time() < end:
        pass


def test_a_copy_slowed_by_waiting_for_a_core_passes() -> None:
    ev, side, slots = _fixture(lambda: time.sleep(0.08))  # 80 ms wall, no CPU: a loaded host
    collect_outputs(ev, side, slots, 0, "benchmark", 0.0, call_ms=1.0)


def test_a_copy_during_which_the_runner_computed_is_deferred_work() -> None:
    ev, side, slots = _fixture(lambda: _spin_cpu(80.0))
    with pytest.raises(StageFailure) as info:
        collect_outputs(ev, side, slots, 0, "benchmark", 0.0, call_ms=1.0)
    assert info.value.error.code == "work_deferred_to_copy"
    assert info.value.error.origin == "candidate"
    assert info.value.error.detail is not None and info.value.error.detail["runner_cpu_ms"] >= 50


def test_runner_cpu_time_is_read_from_the_kernel() -> None:
    before = runner_cpu_ms(os.getpid())
    _spin_cpu(50.0)
    after = runner_cpu_ms(os.getpid())
    assert before is not None and after is not None and after - before >= 30
    assert runner_cpu_ms(2 ** 22 + 12345) is None  # no such process: unknown, never zero

