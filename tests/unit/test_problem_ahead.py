"""Inputs and reference asked of the problem process ahead (sandbox.problem.host): the
judge sends the next timed call's request before it checks the current call and takes the
answer afterwards. Answers come in order, so every other request first reads the one out,
and what the judge takes is a copy of what that request's answer wrote."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from sandbox.problem import host
from sandbox.problem.handle import ProblemDied
from sandbox.problem.host import RemoteProblem
from sandbox.problem.tensors import Slot, total_bytes, view

SLOTS = [Slot("x", "input", "float32", (4,), 64 << 10, 16),
         Slot("out", "output", "float32", (4,), (64 << 10) * 2 + 256, 16)]


class FakeProcess:
    """In-order answers, as the problem process gives them: an inputs_reference answer
    writes the seed into the inputs and seed + 0.5 into the outputs of the judge's buffer."""

    def __init__(self, prob: RemoteProblem):
        self.prob, self.out, self.log = prob, [], []  # type: ignore[var-annotated]

    def request(self, msg: dict[str, Any], timeout: float, fds: Any = None) -> dict[str, Any]:
        self.send(msg)
        return self.await_answer(str(msg.get("op")), timeout)

    def send(self, msg: dict[str, Any], fds: Any = None) -> None:
        self.log.append(("send", msg["op"]))
        self.out.append(msg)

    def await_answer(self, op: str, timeout: float) -> dict[str, Any]:
        msg = self.out.pop(0)
        assert msg["op"] == op, f"answer to {msg['op']!r} read as {op!r}'s"
        self.log.append(("answer", op))
        if op == "inputs_reference":
            assert self.prob._buf is not None
            view(self.prob._buf, SLOTS[0]).fill_(float(msg["seed"]))
            view(self.prob._buf, SLOTS[1]).fill_(float(msg["seed"]) + 0.5)
        return {"ok": True}


@pytest.fixture
def prob() -> RemoteProblem:
    p: Any = RemoteProblem.__new__(RemoteProblem)
    p.dev, p._buf, p._keep = "cpu", None, None
    p._by_slots = {tuple(SLOTS): host._Layout({"n": 4}, SLOTS, None)}
    p.handle = FakeProcess(p)
    out: RemoteProblem = p
    return out


def _values(got: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]) -> tuple[float, float]:
    return float(got[0]["x"][0]), float(got[1]["out"][0])


def test_an_answer_asked_ahead_is_taken_after_other_work(prob: RemoteProblem) -> None:
    prob.send_inputs_and_reference(SLOTS, 3)
    assert _values(prob.take_inputs_and_reference()) == (3.0, 3.5)
    assert _values(prob.inputs_and_reference(SLOTS, 4)) == (4.0, 4.5)


def test_another_request_reads_the_answer_out_first_and_keeps_it(prob: RemoteProblem) -> None:
    prob.send_inputs_and_reference(SLOTS, 5)
    fake: Any = prob.handle
    fake.log.clear()
    prob._request("layout", {"op": "layout"})  # e.g. the problem's checker in the same call
    assert fake.log == [("answer", "inputs_reference"), ("send", "layout"), ("answer", "layout")]
    # a later request that rewrites the shared buffer does not reach the copy kept
    assert prob._buf is not None
    view(prob._buf, SLOTS[0]).fill_(-1.0)
    assert _values(prob.take_inputs_and_reference()) == (5.0, 5.5)


def test_a_buffer_is_never_replaced_under_an_answer_out(prob: RemoteProblem) -> None:
    prob.send_inputs_and_reference(SLOTS, 6)
    old = prob._buf
    prob._ensure(total_bytes(SLOTS) * 4)  # a larger shape's buffer: the answer is read first
    assert prob._buf is not old
    assert _values(prob.take_inputs_and_reference()) == (6.0, 6.5)


def test_an_answer_never_taken_is_dropped_not_given_for_a_later_request(prob: RemoteProblem) -> None:
    prob.send_inputs_and_reference(SLOTS, 7)
    prob.send_inputs_and_reference(SLOTS, 8)
    assert _values(prob.take_inputs_and_reference()) == (8.0, 8.5)
    with pytest.raises(Exception, match="no inputs were asked"):
        prob.take_inputs_and_reference()


def test_an_answer_kept_is_not_given_for_a_later_request_that_failed(prob: RemoteProblem) -> None:
    prob.send_inputs_and_reference(SLOTS, 7)
    prob._request("layout", {"op": "layout"})  # reads 7's answer out and keeps it
    fake: Any = prob.handle

    def refuse(msg: dict[str, Any], fds: Any = None) -> None:
        raise ProblemDied("crashed", "gone")

    fake.send = refuse
    with pytest.raises(Exception, match="problem process failed"):
        prob.send_inputs_and_reference(SLOTS, 8)
    with pytest.raises(Exception, match="no inputs were asked"):  # never 7's, for 8
        prob.take_inputs_and_reference()
