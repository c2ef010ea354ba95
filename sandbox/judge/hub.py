"""What the judge's helpers see of an evaluation: a Protocol, so that they need not import it.

``sandbox.judge.evaluation.Evaluation`` is the one implementation; ``call``, ``isolation``,
``sides`` and ``outputs`` are imported by it and take it as a :class:`Hub`, so no import (not even an
annotation's) runs back to the evaluation. mypy checks that ``Evaluation`` satisfies it
wherever one is passed.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Protocol

import torch

from sandbox.contract.failure import StageFailure
from sandbox.contract.wire import ErrorStage, JudgeRequest, TaskWire
from sandbox.judge.taint import Taint
from sandbox.launcher.proc import RunnerFailure, RunnerHandle
from sandbox.problem.base import Problem
from sandbox.problem.tensors import Slot

if TYPE_CHECKING:
    from sandbox.tools.nvml import Nvml  # loaded on CUDA only


# A timed call's fresh inputs and their reference, made ahead: (slots, inputs, expected)
Ahead = tuple[tuple[Slot, ...], dict[str, torch.Tensor], dict[str, torch.Tensor]]


class SideLike(Protocol):
    """What the thread count reads of a side (``sandbox.judge.sides.Side``)."""

    @property
    def base_threads(self) -> int: ...
    @property
    def prefix(self) -> tuple[str, ...]: ...
    @property
    def runner(self) -> RunnerHandle: ...


class Hub(Protocol):
    """The evaluation's state and calls its helpers use."""

    req: JudgeRequest
    task: TaskWire
    dev: str
    problem: Problem
    sides: list[Any]  # sandbox.judge.sides.Side (which imports this module)
    nbytes: int
    compile_deadline: float
    runners_opened: int
    phases: dict[str, float]
    warnings: list[str]
    nvml_handle: Nvml | None
    rng: random.Random
    taint: Taint
    ahead: Ahead | None

    def left(self, deadline: float) -> float: ...
    def check_clock(self, stage: ErrorStage, deadline: float) -> None: ...
    def wait_s(self, side: Any, deadline: float) -> float: ...
    def answered(self, side: Any, seconds: float) -> None: ...
    def spent(self, stage: ErrorStage, part: str, t0: float) -> float: ...
    def check(self, views: dict[str, torch.Tensor], expected: dict[str, torch.Tensor],
              stage: ErrorStage, where: dict[str, Any], decoys: bool = False) -> None: ...
    def trusted(self, path: str) -> bool: ...
    def phase(self, name: str, t0: float) -> None: ...
    def failure(self, stage: ErrorStage, e: RunnerFailure,
                where: dict[str, Any] | None = None) -> StageFailure: ...
    def noop(self, side: Any, stage: ErrorStage
             ) -> tuple[float, float, float, tuple[float, float], float]: ...
    def _track(self, max_abs: float | None, max_rel: float | None, frac: float) -> None: ...
