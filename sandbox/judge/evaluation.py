"""The judge's evaluation API: sides, deadlines, inputs, reference outputs, checked calls
(each made by :mod:`sandbox.judge.call`).

The stages (``compile`` and ``correctness`` in :mod:`sandbox.judge.correctness`, ``benchmark``
in :mod:`sandbox.judge.benchmark`, ``accept`` in :mod:`sandbox.judge.acceptance`) are built on this
module's public methods; this module imports none of them.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

import torch

from sandbox.contract.failure import StageFailure, infrastructure
from sandbox.contract.text import clean
from sandbox.contract.wire import (
    WIRE_VERSION,
    AcceptanceRecord,
    DiagnosticsRecord,
    ErrorStage,
    ErrorWire,
    JudgeRequest,
    Record,
    TaskWire,
    TimingRecord,
)
from sandbox.judge import cpu_wait, idle, prestart
from sandbox.judge.call import finish_call, send_call
from sandbox.judge.checks import check_outputs, correctness_record, track
from sandbox.judge.clock import overrun
from sandbox.judge.device import device_environment
from sandbox.judge.escape import claim_problem
from sandbox.judge.hub import Ahead
from sandbox.judge.isolation import check_beside
from sandbox.judge.outputs import labels
from sandbox.judge.reply import host_ms, number
from sandbox.judge.sides import MIN_WAIT_S, Side, open_sides
from sandbox.judge.taint import Taint
from sandbox.launcher.identity import launch_warnings
from sandbox.launcher.proc import RunnerFailure
from sandbox.problem.host import make_problem
from sandbox.problem.tensors import Slot, total_bytes

if TYPE_CHECKING:
    from sandbox.tools.nvml import Nvml

# One answer of a runner is never waited for less than MIN_WAIT_S (sandbox.judge.sides) nor less
# than WAIT_FACTOR times its longest answer so far.
WAIT_FACTOR = 50.0


class Evaluation:
    """One judge's state: the request, the open sides, the deadlines and the partial record."""

    def __init__(self, req: JudgeRequest):
        if req.task is None:
            raise infrastructure("bad_request", "the judge was given no task")
        self.req = req
        self.task: TaskWire = req.task
        self.device: str = req.device
        self.dev = "cuda" if self.device == "cuda" else "cpu"
        self.errors: list[ErrorWire] = []
        self.warnings: list[str] = launch_warnings()  # what of the runner isolation did not hold
        self.stage: ErrorStage | None = None
        self.sides: list[Side] = []
        self.rng = random.Random(req.phase_seed)
        self.t0 = time.monotonic()
        self.compile_deadline = self.t0 + req.limits.compile_s
        self.run_deadline = self.compile_deadline + req.limits.run_s
        self.stage_t0 = self.t0
        self.answers: dict[str, float] = {}  # the current stage's answers' round trips, by role
        self.roles: dict[int, str] = {}  # id(side) -> its role where not the candidate's
        self.compile_s: float | None = None
        self.correctness: dict[str, Any] = {}
        self.timing: TimingRecord | None = None
        self.acceptance: AcceptanceRecord | None = None
        self.calibration: dict[str, Any] | None = None
        self.diagnostics: DiagnosticsRecord | None = None  # sandbox/tools/profiling.py
        self.phases: dict[str, float] = {}
        # Where each stage's calls spend the judge's time (seconds, "<stage>_<part>", also
        # kept in the phases by spent()): prepare (inputs, reference), send (inputs in,
        # poison, guards, request), wait (the runner's answer), check (everything after
        # it), empty (the interleaved empty calls).
        self.split: dict[str, float] = {}
        self.started_wall: float | None = None
        self.runners_opened = 0
        self.nvml_handle: Nvml | None = None  # sandbox.judge.isolation's, opened on first use
        # The next timed call's fresh inputs and their reference (slots, inputs, expected),
        # made by the problem process while the judge checked the last call (call.Pending)
        self.ahead: Ahead | None = None
        # The judge's own torch ops (inputs in, poison, guard bands, checks) are small: run
        # them on one thread. With torch's intra-op pool, a 64 KiB guard band's compare woke
        # a second thread on every call (20 ms a call at idle on 2 cores, 150 ms loaded, where
        # one thread took 0.5 and 3.4 ms), and the pool's spinning workers took CPU from the
        # runner being timed beside them.
        torch.set_num_threads(1)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        # The trusted reference, for the task's contract (sandbox.problem.base, sandbox.problem.field):
        # field problems run their generator once per shape here, for the layout.
        self.problem = make_problem(self.task, req.reference, self.dev, self.rng)
        self.bench_dims: dict[str, int] = dict(self.task.timed or self.task.tune[0])
        all_dims = [*self.task.tune, *self.task.hidden, self.bench_dims]
        self.nbytes = max(total_bytes(self.problem.layout(d)) for d in all_dims)
        self.taint = Taint([*self.task.tune, self.bench_dims], self.phases)  # sandbox.judge.taint

    # ---- deadlines and failures ----------------------------------------------------
    def left(self, deadline: float) -> float:
        return max(0.0, deadline - time.monotonic())

    def start_run_clock(self) -> None:
        """``run_s`` bounds each run stage on its own (correctness, timing, acceptance, its
        replicate): a slow first stage leaves the next its whole budget."""
        self.stage_t0 = time.monotonic()
        self.run_deadline = self.stage_t0 + self.req.limits.run_s
        self.answers = {}
        self.roles = {}

    def name_current(self, side: Side) -> None:
        """``side`` is the current best's for this stage: its answers are counted apart
        from the candidate's when the stage's clock asks whose time ran out."""
        self.roles[id(side)] = "current"

    def start_open_clock(self) -> None:
        """Runners opened after the compile stage (the acceptance pairs) get ``compile_s``."""
        self.compile_deadline = time.monotonic() + self.req.limits.compile_s

    def wait_s(self, side: Side, deadline: float) -> float:
        """How long the judge waits for one answer of ``side``: what the stage has left, but
        never less than :data:`MIN_WAIT_S` nor :data:`WAIT_FACTOR` times its longest answer
        so far. A stage that ran out between calls is :meth:`check_clock`'s to judge."""
        floor = max(MIN_WAIT_S, WAIT_FACTOR * side.longest_s)
        return max(self.left(deadline), min(floor, self.req.limits.run_s))  # never past run_s

    def check_clock(self, stage: ErrorStage, deadline: float) -> None:
        """Before a call: has ``stage`` used up its budget, and whose time was it
        (:func:`sandbox.judge.clock.overrun`; each side's answers counted on its own)?"""
        failure = overrun(stage, self.t0 if stage == "compile" else self.stage_t0, deadline,
                          time.monotonic(), self.answers)
        if failure is not None:
            raise failure

    def answered(self, side: Side, seconds: float) -> None:
        """One answer of ``side`` took ``seconds`` (the judge's round trip)."""
        side.longest_s = max(side.longest_s, seconds)
        role = self.roles.get(id(side), "candidate")
        self.answers[role] = self.answers.get(role, 0.0) + seconds

    def spent(self, stage: ErrorStage, part: str, t0: float) -> float:
        """Add the time since ``perf_counter`` ``t0`` to ``stage``'s ``part``; now."""
        now = time.perf_counter()
        key = f"{stage}_{part}"
        self.split[key] = self.split.get(key, 0.0) + (now - t0)
        # Kept in the phases as it grows, so that the taint's mark (sandbox.judge.taint)
        # sees which of them a call after a hidden shape changed.
        self.phases[key] = round(self.split[key], 4)
        return now

    @staticmethod
    def failure(stage: ErrorStage, e: RunnerFailure, where: dict[str, Any] | None = None) -> StageFailure:
        """A runner's failure is the candidate's (its code names what it did). ``where``
        (the judge's, last, so a runner cannot set it): the call's dims and shape kind, by
        which the host withholds the text of a failure on a hidden shape."""
        code = "compile_timeout" if stage == "compile" and e.code == "timeout" else e.code
        return StageFailure(stage, code, e.message, line=e.line,
                            detail={**(e.detail or {}), **(where or {})})

    # ---- inputs and reference ------------------------------------------------------
    def slots(self, dims: dict[str, int] | None = None) -> list[Slot]:
        """Where the tensors of ``dims`` live (default: the timed shape)."""
        return self.problem.layout(dims if dims is not None else self.bench_dims)

    def inputs(self, slots: list[Slot], seed: int | None = None) -> dict[str, torch.Tensor]:
        """Fresh inputs from ``seed``, or from the secret phase seed's stream."""
        return self.problem.inputs(slots, seed if seed is not None else self.rng.getrandbits(62))

    def reference(self, slots: list[Slot], inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.problem.reference(slots, inputs)

    # ---- sides ---------------------------------------------------------------------
    def open_side(self, path: str, stage: ErrorStage, buffers: tuple[Any, ...] = ()) -> Side:
        """Start a runner for ``path`` and load the module (the compile stage's work).

        ``buffers`` (CUDA): this side's own buffer, then the ones it trades with."""
        return self.open_sides([(path, buffers)], stage)[0]

    def open_sides(self, wanted: list[tuple[str, tuple[Any, ...]]], stage: ErrorStage,
                   renames: list[tuple[str, str]] | None = None) -> list[Side]:
        """Several runners at once (:func:`sandbox.judge.sides.open_sides`)."""
        return open_sides(self, wanted, stage, renames)

    def trusted(self, path: str) -> bool:
        """Whether ``path`` is trusted task code (exempt from the kernel-only op audit)."""
        return ((path == self.req.candidate and self.req.trusted_candidate)
                or (path == self.req.current and self.req.trusted_current))

    def _idle_figures(self, side: Side) -> None:
        """The most CPU any runner used between calls (sandbox.judge.idle), seconds."""
        for key, ns in zip(("between_calls_cpu_max", "inputs_write_cpu_max"), side.idle_max_ns,
                           strict=True):
            self.phases[key] = max(self.phases.get(key, 0.0), round(ns / 1e9, 6))

    def close_side(self, side: Side) -> None:
        self._idle_figures(side)
        side.close()
        self.roles.pop(id(side), None)  # a later side may get its id
        if side in self.sides:
            self.sides.remove(side)

    # ---- one checked call ------------------------------------------------------------
    def call(self, side: Side, slots: list[Slot], inputs: dict[str, torch.Tensor], *,
             stage: ErrorStage, deadline: float, expected: dict[str, torch.Tensor] | None,
             where: dict[str, Any], buf: int = 0) -> dict[str, Any]:
        """Copy inputs in, poison outputs, launch, then check what the runner left."""
        return finish_call(self, send_call(self, side, slots, inputs, stage=stage, deadline=deadline,
                                           expected=expected, where=where, buf=buf))

    def check(self, views: dict[str, torch.Tensor], expected: dict[str, torch.Tensor],
              stage: ErrorStage, where: dict[str, Any], decoys: bool = False) -> None:
        """Every output against the reference (:func:`sandbox.judge.checks.check_outputs`)."""
        check_outputs(self.task.correctness, self.correctness, views, expected, stage, where, decoys)

    def _track(self, max_abs: float | None, max_rel: float | None, frac: float) -> None:
        track(self.correctness, max_abs, max_rel, frac)

    def timed(self, side: Side, slots: list[Slot], check: bool, stage: ErrorStage,
              inputs: dict[str, torch.Tensor] | None = None, buf: int = 0) -> dict[str, Any]:
        """One timed call on fresh inputs (from the secret phase seed), optionally checked.
        Where every timed call is checked (the default ``timed_check_fraction``), the next
        call's fresh inputs and reference are made while this one is checked
        (:func:`sandbox.judge.call.finish_call`); with a sampled fraction they are not, so
        that no reference is computed for a call that is not checked."""
        t0 = time.perf_counter()
        expected: dict[str, torch.Tensor] | None = None
        fresh = inputs is None
        ahead, self.ahead = self.ahead, None
        if inputs is None and ahead is not None and ahead[0] == tuple(slots):
            inputs, expected = ahead[1], (ahead[2] if check else None)
        elif inputs is None and check:
            inputs, expected = self.problem.inputs_and_reference(slots, self.rng.getrandbits(62))
        elif inputs is None:
            inputs = self.inputs(slots)
        elif check:
            expected = self.reference(slots, inputs)
        self.spent(stage, "prepare", t0)
        return finish_call(self, send_call(
            self, side, slots, inputs, stage=stage, deadline=self.run_deadline, expected=expected,
            where={"dims": dict(self.bench_dims), "phase": stage}, buf=buf,
            ahead=slots if fresh and self.task.correctness.timed_check_fraction >= 1.0 else None))

    def timed_together(self, sides: list[Side], slots: list[Slot], stage: ErrorStage) -> None:
        """One checked, discarded call per side, sent to all of them before any answer is
        read: their first calls (Triton's JIT compile, CUDA module loads) run in parallel.
        For warm-up only: the sides' times overlap, so none is a measurement."""
        pending = []
        for side in sides:
            inputs = self.inputs(slots)
            pending.append(send_call(
                self, side, slots, inputs, stage=stage, deadline=self.run_deadline,
                expected=self.reference(slots, inputs),
                where={"dims": dict(self.bench_dims), "phase": stage}))
        failure: StageFailure | None = None
        for p in pending:  # every answer is read, so that no reply is left in a channel
            try:
                # One runner's answer can come while another still compiles (Triton runs
                # gcc under that runner's uid): the process check waits for all of them.
                finish_call(self, p, isolation=False)
            except StageFailure as e:
                failure = failure or e
        if failure is not None:
            raise failure
        if stage in ("benchmark", "accept"):
            check_beside(self, stage)

    def noop(self, side: Side, stage: ErrorStage
             ) -> tuple[float, float, float, tuple[float, float], float]:
        """An empty timed call: (judge round trip, its validated event time, its idle tail,
        the runner's host time before and after its timed region, the round trip's wait for
        a CPU on the CPU device).

        The runner's figures are validated against the judge's own round trip: finite,
        non-negative, and no longer than the round trip that contained them.
        """
        t_empty = time.perf_counter()
        self.taint.touch(stage)
        idle.before_touch(side, stage)
        waits = cpu_wait.before_call(self.dev, side.runner.proc.pid)
        t0 = time.perf_counter()
        try:
            r = side.runner.request({"op": "call", "noop": True},
                                    self.wait_s(side, self.run_deadline))
        except RunnerFailure as e:
            raise self.failure(stage, e) from None
        judge_ms = (time.perf_counter() - t0) * 1e3
        idle.replied(side)
        wait_ms = cpu_wait.after_call(waits, side.runner.proc.pid, judge_ms)
        ms, tail = number(r.get("ms")), number(r.get("tail_ms", 0.0))
        why = claim_problem(ms, number(r.get("wall_ms")), judge_ms, self.dev)
        if why is None and (tail is None or tail < 0):
            why = f"an idle tail of {r.get('tail_ms')!r}"
        if why is not None or ms is None or tail is None:
            raise StageFailure(stage, "timing_inconsistent",
                               f"an empty call claimed {r.get('ms')!r} ms: {why}")
        self.spent(stage, "empty", t_empty)
        return judge_ms, ms, tail, host_ms(r), wait_ms

    # ---- result ----------------------------------------------------------------------
    def phase(self, name: str, t0: float) -> None:
        """Record how long phase ``name`` took since monotonic time ``t0``."""
        self.phases[name] = round(time.monotonic() - t0, 4)

    def record(self) -> Record:
        for side in self.sides:
            self._idle_figures(side)
        return Record(wire_version=WIRE_VERSION, stage=self.stage, errors=tuple(self.errors),
                      warnings=tuple(clean(w) for w in [*self.warnings, *labels(self)]),
                      device=self.device,
                      environment=device_environment(self.device), compile_s=self.compile_s,
                      correctness=correctness_record(self.correctness), timing=self.timing,
                      acceptance=self.acceptance, calibration=self.calibration,
                      diagnostics=self.diagnostics,
                      phases=dict(self.phases), judge_started=self.started_wall,
                      judge_finished=time.time(),
                      taint=self.taint.record(self.diagnostics is not None))

    def shutdown(self) -> None:
        # Every process asked first, then each waited for: their exits overlap.
        for side in self.sides:
            side.runner.ask_exit()
        self.problem.ask_exit()
        prestart.ask_exit_all()
        for side in list(self.sides):
            self.close_side(side)
        self.problem.close()
        prestart.close_all()
