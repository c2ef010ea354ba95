"""One checked call of a runner, as the judge makes it: inputs in, outputs poisoned, guard
bands armed, the request sent (:func:`send_call`); then the answer read and everything it
left checked (:func:`finish_call`): threads, guard bands, streams, the op audit, precision
flags, inputs unchanged, outputs against the reference, and the runner's timing claims
against the judge's own round trip. :class:`~sandbox.judge.evaluation.Evaluation` sends its
calls through here.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import torch

from sandbox.contract.failure import StageFailure
from sandbox.contract.wire import ErrorStage
from sandbox.judge import cpu_wait, idle
from sandbox.judge.escape import claim_problem
from sandbox.judge.hub import Hub
from sandbox.judge.isolation import check_beside, check_threads
from sandbox.judge.outputs import collect_outputs, verify_outputs
from sandbox.judge.reply import host_ms, number
from sandbox.judge.sides import Side
from sandbox.launcher.proc import RunnerFailure
from sandbox.problem.tensors import Guards, Slot, poison, same_bytes


@dataclass
class Pending:
    """A call sent to a runner whose answer the judge has not read yet."""

    side: Side
    slots: list[Slot]
    inputs: dict[str, torch.Tensor]
    views: dict[str, torch.Tensor]
    guards: Guards
    buf: int
    t0: float
    stage: ErrorStage
    deadline: float
    expected: dict[str, torch.Tensor] | None
    where: dict[str, Any]
    waits: cpu_wait.Mark | None = None
    ahead: list[Slot] | None = None  # ask the problem for the next call's inputs meanwhile


def send_call(ev: Hub, side: Side, slots: list[Slot], inputs: dict[str, torch.Tensor], *,
               stage: ErrorStage, deadline: float, expected: dict[str, torch.Tensor] | None,
               where: dict[str, Any], buf: int = 0, ahead: list[Slot] | None = None) -> Pending:
    """The first half of :meth:`Evaluation.call`: inputs in, outputs poisoned, guards armed, request
    sent; :func:`finish_call` takes the answer and checks everything. ``ahead``: the slots
    of the next timed call, whose fresh inputs and reference :func:`finish_call` has the
    problem process make while the judge checks this one."""
    t_send = time.perf_counter()
    ev.check_clock(stage, deadline)
    ev.taint.call(stage, where)  # before the inputs are there to be read
    touched = idle.before_touch(side, stage)  # the runner proven idle before any write
    buf = buf if buf < len(side.bases) else 0
    views = side.views(slots, buf)
    for s in slots:
        if s.role == "input":
            views[s.name].copy_(inputs[s.name])
        else:
            poison(views[s.name])
    guards = Guards(slots, ev.dev, ev.rng.getrandbits(62))
    base = side.bases[buf]
    guards.arm(base)
    if ev.dev == "cuda":
        torch.cuda.synchronize()
    msg: dict[str, Any] = {"op": "call", "buf": buf,
                           "args": [s.wire() for s in ev.problem.call_slots(slots)]}
    data = ev.problem.call_data(slots)
    if data is not None:
        msg["data"] = data
    waits = cpu_wait.before_call(ev.dev, side.runner.proc.pid)
    idle.before_send(side, stage, touched)
    t0 = ev.spent(stage, "send", t_send)
    try:
        side.runner.send(msg)
    except RunnerFailure as e:
        raise ev.failure(stage, e, where) from None
    return Pending(side, slots, inputs, views, guards, buf, t0, stage, deadline, expected, where,
                   waits, ahead)

def finish_call(ev: Hub, p: Pending, isolation: bool = True) -> dict[str, Any]:
    side, slots, buf = p.side, p.slots, p.buf
    stage, deadline, expected, where = p.stage, p.deadline, p.expected, p.where
    try:
        reply = side.runner.receive(ev.wait_s(side, deadline))
    except RunnerFailure as e:
        raise ev.failure(stage, e, where) from None
    t_back = ev.spent(stage, "wait", p.t0)
    judge_ms = (t_back - p.t0) * 1e3
    idle.replied(side)
    wait_ms = cpu_wait.after_call(p.waits, side.runner.proc.pid, judge_ms)
    ev.answered(side, judge_ms / 1e3)
    check_threads(side, stage, "when its call returned,")  # before any output is read
    if ev.problem.returns and expected is not None:
        collect_outputs(ev, side, slots, buf, stage, deadline, judge_ms)
    if p.ahead is None:
        return _checked(ev, p, reply, judge_ms, wait_ms, t_back, isolation)
    # The next call's fresh inputs and reference, made by the problem process while the
    # judge checks this call's outputs: after the returned outputs' copy, whose round trip
    # is bounded by the judge's own copy, and taken before this function returns, so that
    # nothing measured after it (an empty call, an idle probe) runs beside the problem's work.
    # They are the judge's and the problem's alone until the next call writes them in.
    ev.problem.send_inputs_and_reference(p.ahead, ev.rng.getrandbits(62))
    try:
        out = _checked(ev, p, reply, judge_ms, wait_ms, t_back, isolation)
    except BaseException:
        with contextlib.suppress(Exception):  # the call's own failure is the one to report
            ev.problem.take_inputs_and_reference()
        raise
    t = time.perf_counter()
    inputs_next, expected_next = ev.problem.take_inputs_and_reference()
    ev.ahead = (tuple(p.ahead), inputs_next, expected_next)
    ev.spent(stage, "prepare", t)
    return out


def _checked(ev: Hub, p: Pending, reply: dict[str, Any], judge_ms: float, wait_ms: float,
             t_back: float, isolation: bool) -> dict[str, Any]:
    """What :func:`finish_call` checks once the answer is read: guard bands, what ran
    beside the call, streams, the op audit, precision flags, inputs unchanged, outputs
    against the reference, and the runner's timing claims."""
    side, slots, inputs, views, guards = p.side, p.slots, p.inputs, p.views, p.guards
    stage, expected, where = p.stage, p.expected, p.where
    base = side.bases[p.buf]
    breach = guards.first_breach(base)
    if breach is not None:
        what, at = breach
        raise StageFailure(stage, "out_of_bounds_write",
                           f"the candidate wrote outside its tensors: into the guard band "
                           f"{what} ({at} bytes in) for dims {where.get('dims')}",
                           detail={**where, "region": what, "offset": at, "side": side.path})
    if isolation and stage in ("benchmark", "accept"):
        check_beside(ev, stage)
    if stage in ("benchmark", "accept") and (reply.get("streams") or reply.get("stream_ok") is False):
        raise StageFailure(stage, "side_stream",
                           f"the candidate created {reply.get('streams')} CUDA stream(s) or left "
                           "the timed stream: its work would escape the timed events")
    audit = reply.get("audit")
    if side.audit_ops and not isinstance(audit, dict):
        raise StageFailure(stage, "op_audit_tampered",
                           "the runner returned no op audit for a kernel-only launch")
    if isinstance(audit, dict) and audit.get("compute_ops"):
        ops = [str(o)[:40] for o in audit["compute_ops"]][:32]
        raise StageFailure(stage, "torch_compute_in_launch",
                           f"torch computed inside a kernel-only launch: {', '.join(ops)} "
                           "(only allocation, views, fills and copies are allowed; host code and "
                           "autotune hooks see decoys: reset outputs between configs with "
                           "autotune's reset_to_zero or restore_value)",
                           detail={**where, "compute_ops": ops,
                                   "ops": [str(o)[:40] for o in audit.get("ops", [])][:64]})
    if reply.get("flags_ok") is False:
        raise StageFailure(stage, "precision_flags_changed",
                           "the candidate changed the pinned TF32 / precision flags")
    for s in slots:
        if s.role == "input" and s.name not in ev.problem.scratch \
                and not same_bytes(views[s.name], inputs[s.name]):
            raise StageFailure(stage, "input_mutated",
                               f"input {s.name!r} was modified by the candidate", detail=where)
    if expected is not None:
        if not getattr(ev.problem, "checker_decides", False):  # else: verify_outputs' bound
            ev.check(views, expected, stage, where, decoys=side.audit_ops and not ev.problem.returns)
        verify_outputs(ev, slots, inputs, views, stage, where, expected)
    ms, wall, tail = number(reply.get("ms")), number(reply.get("wall_ms")), number(reply.get("tail_ms", 0.0))
    why = claim_problem(ms, wall, judge_ms, ev.dev)
    if why is not None or ms is None:
        raise StageFailure(stage, "timing_inconsistent",
                           f"the runner claimed {reply.get('ms')!r} ms: {why}")
    ev.spent(stage, "check", t_back)
    return {"ms": ms, "wall_ms": wall, "judge_ms": judge_ms, "wait_ms": wait_ms,
            "tail_ms": tail if tail is not None and tail >= 0 else 0.0,
            "threads": int(reply.get("threads", -1)), "host_ms": host_ms(reply)}
