"""The judge's :class:`~sandbox.problem.base.Problem`: problem code in a process of its own.

The stages see the same interface as ever; behind it, every call into the task's code
(input generator, reference, float64 reference, GPU MODE's ``check_implementation``) is a
request to the problem process (:mod:`sandbox.problem.handle`, served by
:mod:`sandbox.problem.serve`). The judge keeps what decides the verdict: the layout
(:func:`sandbox.problem.tensors.layout` of the shapes and dtypes the problem reported, checked
here), the buffer (its own, handed over as a descriptor, read back into the judge's own
tensors at once), poisoning, comparison and the record. The problem process never holds
the record's key, the request or the judge's memory.

Whose fault: a failure of the problem process (an error, a crash, silence) is the task's
(``origin: infrastructure``, ``reference_failed``), except while it checks outputs a side
handed it: then the checker was provoked by those outputs, and the side fails
(:class:`CheckerFailed`, ``check_failed``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import math
import mmap
import os
import random
from dataclasses import dataclass
from typing import Any

import torch

from sandbox.contract import text
from sandbox.contract.conventions import convention
from sandbox.contract.failure import infrastructure
from sandbox.contract.wire import TaskWire, TensorWire
from sandbox.launcher.gpu_share import GpuBuffer, export_buffer
from sandbox.problem import handle as problem_handle
from sandbox.problem.base import Problem
from sandbox.problem.handle import ProblemDied, ProblemError, ProblemHandle
from sandbox.problem.tensors import DTYPES, Slot, layout, poison, total_bytes, view

MAX_TENSORS = 256
MAX_ELEMENTS = 1 << 36
_CODES = {"reference_failed", "unsupported_dtype", "needs_cuda", "device_out_of_memory"}
IR_WHAT = "input generator or reference"  # what a failure of inputs_reference names
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


class CheckerFailed(Exception):
    """The problem's checker failed on outputs a side handed it: that side's failure."""


@dataclass(frozen=True)
class _Layout:
    dims: dict[str, int]
    slots: list[Slot]
    call_data: Any


class RemoteProblem(Problem):
    """A task's problem served by its own process; see the module docstring."""

    _device_sent = _device_pending = False  # device_ahead()
    # send_inputs_and_reference()'s slots and buffer while its answer is out; then the answer
    _ahead: tuple[list[Slot], torch.Tensor] | None = None
    _early: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] | None = None

    def __init__(self, task: TaskWire, reference: str, dev: str, init_seed: int):
        super().__init__(task, dev)
        self.init_seed = init_seed
        self._buf: torch.Tensor | None = None
        self._keep: Any = None  # the memfd mapping or the GpuBuffer behind ``_buf``
        self._by_dims: dict[tuple[tuple[str, int], ...], _Layout] = {}
        self._by_slots: dict[tuple[Slot, ...], _Layout] = {}
        try:
            self.handle: ProblemHandle = problem_handle.take(dev)
        except ProblemDied as e:
            raise infrastructure(e.code, f"cannot start the problem process: {e.message}") from None
        try:
            reply = self._request("problem setup", {
                "op": "setup", "task": dataclasses.asdict(task), "reference": reference,
                "init_seed": init_seed}, problem_handle.budget["setup_s"])
        except BaseException:
            self.handle.close()
            raise
        self.returns = reply.get("returns") is True
        self._checker = reply.get("checker") is True
        self._init = reply.get("init")
        # GPU MODE's check_implementation is the authority on values and dtypes (kgrader
        # keeps only a sanity bound: sandbox.judge.outputs.verify_outputs) unless the task is strict.
        strict = task.problem is not None and task.problem.strict
        self.checker_decides = convention(task.contract).checker_decides and self._checker \
            and not strict
        self.notes: list[str] = []  # the problem process's account of its layouts

    # ---- talking to the process ----------------------------------------------------------
    def device_ahead(self) -> None:
        """Have the process create its CUDA context now, beside the judge's and the
        runner's (:func:`sandbox.judge.correctness.device_ahead`); the answer is taken
        before the next request's. Its failure is left to that request (the buffer's
        import creates the context anyway)."""
        if self.dev == "cuda" and not self._device_sent:
            self._device_sent = True
            with contextlib.suppress(ProblemDied):
                self.handle.send({"op": "device"})
                self._device_pending = True

    def device_done(self) -> None:
        """Wait for :meth:`device_ahead`'s answer, whatever it was."""
        if self._device_pending:
            self._device_pending = False
            with contextlib.suppress(ProblemDied, ProblemError):
                self.handle.await_answer("device", problem_handle.budget["setup_s"])

    def _request(self, what: str, msg: dict[str, Any], timeout: float | None = None,
                 fds: list[int] | None = None) -> dict[str, Any]:
        timeout = problem_handle.budget["call_s"] if timeout is None else timeout
        self.device_done()
        self._drain()
        try:
            return self.handle.request(msg, timeout, fds)
        except (ProblemError, ProblemDied) as e:
            raise self._failed(what, e) from None

    def _send(self, what: str, msg: dict[str, Any]) -> None:
        """The first half of :meth:`_request`. Before either, a request sent ahead and not
        yet taken (:meth:`send_inputs_and_reference`) is read and kept for its taker:
        answers come in order, so no answer is ever read as another request's."""
        self.device_done()
        self._drain()
        try:
            self.handle.send(msg)
        except ProblemDied as e:
            raise self._failed(what, e) from None

    def _await(self, what: str, op: str, timeout: float | None = None) -> dict[str, Any]:
        """The second half of :meth:`_request`: the answer to the oldest request."""
        timeout = problem_handle.budget["call_s"] if timeout is None else timeout
        try:
            return self.handle.await_answer(op, timeout)
        except (ProblemError, ProblemDied) as e:
            raise self._failed(what, e) from None

    @staticmethod
    def _failed(what: str, e: ProblemError | ProblemDied) -> Exception:
        if isinstance(e, ProblemError):
            code = e.code if e.code in _CODES else "reference_failed"
            return infrastructure(code, f"the problem's {what} failed: {_text(e.message)}")
        return infrastructure("reference_failed", f"the problem process failed in its "
                              f"{what} ({e.code}): {_text(e.message)}")

    def _ensure(self, nbytes: int) -> torch.Tensor:
        """The shared buffer, at least ``nbytes`` long (a new one is handed over if not)."""
        self._drain()  # before the buffer its answer is in can be replaced
        if self._buf is not None and self._buf.numel() >= nbytes:
            return self._buf
        nbytes = max(nbytes, 2 * (self._buf.numel() if self._buf is not None else 0))
        old = self._keep
        if self.dev == "cpu":
            # Sealed: the process can write the bytes, never shrink the file under the
            # judge's mapping (which would SIGBUS the judge).
            fd = os.memfd_create("kgrader-problem", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, nbytes)
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
                self._keep = mmap.mmap(fd, nbytes)
                self._buf = torch.frombuffer(self._keep, dtype=torch.uint8)
                self._request("buffer", {"op": "buffer", "nbytes": nbytes}, fds=[fd])
            finally:
                os.close(fd)
        else:
            gb = export_buffer(nbytes)
            self._keep, self._buf = gb, gb.tensor
            self._request("buffer", {"op": "buffer", "nbytes": gb.nbytes}, fds=[gb.fd])
        if isinstance(old, GpuBuffer):
            old.close()
        return self._buf

    # ---- the interface ------------------------------------------------------------------
    def layout(self, dims: dict[str, int]) -> list[Slot]:
        key = tuple(sorted(dims.items()))
        lay = self._by_dims.get(key)
        if lay is None:
            reply = self._request("layout", {"op": "layout", "dims": dict(dims)})
            wires = _tensor_wires(reply.get("tensors"))
            slots = layout(wires, dict(dims))
            inputs = {w.name for w in wires if w.role == "input"}
            scratch = reply.get("scratch")
            if not isinstance(scratch, list) or not set(map(str, scratch)) <= inputs:
                raise infrastructure("reference_failed", "the problem process named scratch "
                                     "tensors that are not its inputs")
            lay = _Layout(dict(dims), slots, reply.get("call_data"))
            notes = reply.get("notes")
            for n in notes[:8] if isinstance(notes, list) else []:
                if _text(str(n)) not in self.notes and len(self.notes) < 8:
                    self.notes.append(_text(str(n)))
            self.scratch = self.scratch | frozenset(map(str, scratch))
            self._by_dims[key] = lay
            self._by_slots[tuple(slots)] = lay
        return lay.slots

    def _of(self, slots: list[Slot]) -> _Layout:
        lay = self._by_slots.get(tuple(slots))
        if lay is None:
            raise infrastructure("judge_error", "slots that no layout made")
        return lay

    def inputs(self, slots: list[Slot], seed: int) -> dict[str, torch.Tensor]:
        lay = self._of(slots)
        base = self._ensure(total_bytes(slots))
        ins = [s for s in slots if s.role == "input"]
        self._request("input generator", {"op": "inputs", "dims": lay.dims, "seed": seed,
                                          "slots": [_named(s) for s in ins]})
        return {s.name: view(base, s).clone() for s in ins}

    def reference(self, slots: list[Slot], inputs: dict[str, torch.Tensor],
                  float64: bool = False) -> dict[str, torch.Tensor]:
        lay = self._of(slots)
        ins = [s for s in slots if s.role == "input"]
        outs = [s for s in slots if s.role == "output"]
        if float64:  # the float64 outputs get slots of their own, after this layout's
            wide = layout([TensorWire(s.name, "output", _wide(s.dtype), s.shape) for s in outs], {})
            at = total_bytes(slots)
            outs = [dataclasses.replace(s, offset=s.offset + at) for s in wide]
        base = self._ensure(total_bytes(slots) + (total_bytes(outs) if float64 else 0))
        for s in ins:
            view(base, s).copy_(inputs[s.name])
        for s in outs:
            poison(view(base, s))
        if self.dev == "cuda":  # the process reads what this process's stream wrote
            torch.cuda.synchronize()
        self._request("float64 reference" if float64 else "reference",
                      {"op": "reference", "dims": lay.dims, "float64": float64,
                       "inputs": [_named(s) for s in ins], "outputs": [_named(s) for s in outs]})
        if self.dev == "cuda":
            torch.cuda.synchronize()
        return {s.name: view(base, s).clone() for s in outs}

    def inputs_and_reference(self, slots: list[Slot], seed: int
                             ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        self.send_inputs_and_reference(slots, seed)
        return self.take_inputs_and_reference()

    def send_inputs_and_reference(self, slots: list[Slot], seed: int) -> None:
        """The request of :meth:`inputs_and_reference`, sent now: the process works on it
        while the judge does other work; :meth:`take_inputs_and_reference` reads it."""
        lay = self._of(slots)
        base = self._ensure(total_bytes(slots))
        ins = [s for s in slots if s.role == "input"]
        outs = [s for s in slots if s.role == "output"]
        for s in outs:
            poison(view(base, s))
        if self.dev == "cuda":  # the process reads what this process's stream wrote
            torch.cuda.synchronize()
        self._early = None  # an answer asked ahead and never taken is dropped
        self._send(IR_WHAT, {"op": "inputs_reference", "dims": lay.dims, "seed": seed,
                             "inputs": [_named(s) for s in ins],
                             "outputs": [_named(s) for s in outs]})
        self._ahead = (slots, base)

    def take_inputs_and_reference(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        self._drain()
        got, self._early = self._early, None
        if got is None:
            raise infrastructure("judge_error", "no inputs were asked of the problem process")
        return got

    def _drain(self) -> None:
        """Read the answer to a request sent ahead, if one is out, into ``_early``: copies
        of the buffer it was written into, made (and on CUDA finished) before anything else
        is asked or the buffer replaced."""
        if self._ahead is None:
            return
        (slots, base), self._ahead = self._ahead, None
        self._await(IR_WHAT, "inputs_reference")
        self._early = ({s.name: view(base, s).clone() for s in slots if s.role == "input"},
                       {s.name: view(base, s).clone() for s in slots if s.role == "output"})
        if self.dev == "cuda":  # the copies done before the process may write the buffer again
            torch.cuda.synchronize()

    def call_slots(self, slots: list[Slot]) -> list[Slot]:
        return [s for s in slots if s.role == "input"] if self.returns else slots

    def call_data(self, slots: list[Slot]) -> Any:
        return self._of(slots).call_data

    def verify(self, slots: list[Slot], inputs: dict[str, torch.Tensor],
               outputs: dict[str, torch.Tensor]) -> str | None:
        if not self._checker:
            return None
        lay = self._of(slots)
        base = self._ensure(total_bytes(slots))
        ins = [s for s in slots if s.role == "input"]
        outs = [s for s in slots if s.role == "output"]
        for s in ins:
            view(base, s).copy_(inputs[s.name])
        for s in outs:
            view(base, s).copy_(outputs[s.name])
        if self.dev == "cuda":
            torch.cuda.synchronize()
        try:
            reply = self.handle.request({"op": "verify", "dims": lay.dims,
                                         "inputs": [_named(s) for s in ins],
                                         "outputs": [_named(s) for s in outs]},
                                        problem_handle.budget["call_s"])
        except ProblemError as e:
            if e.code in ("needs_cuda", "device_out_of_memory"):  # the device's, whatever the outputs
                raise infrastructure(e.code, f"the problem's check_implementation failed: "
                                     f"{_text(e.message)}") from None
            raise CheckerFailed(f"the problem's check_implementation failed on these outputs "
                                f"({e.code}): {_text(e.message)}") from None
        except ProblemDied as e:
            raise CheckerFailed(f"the problem's check_implementation failed on these outputs "
                                f"({e.code}): {_text(e.message)}") from None
        verdict = reply.get("verdict")
        return None if verdict is None else _text(str(verdict)) or "rejected"

    def runner_setup(self) -> dict[str, Any]:
        if not self.returns:
            return {}
        pw = self.task.problem
        setup: dict[str, Any] = {"contract": self.task.contract,
                                 "modules": dict(pw.modules) if pw else {}}
        if self.checker_decides:  # a float output of another dtype is the checker's to judge
            setup["cast_floats"] = True
        if convention(self.task.contract).builds_entry:
            setup.update(init=self._init, init_seed=self.init_seed)
        return setup

    def harness_processes(self) -> dict[int, int]:
        return {} if self.handle.dead else {self.handle.proc.pid: self.handle.uid}

    def ask_exit(self) -> None:
        self.handle.ask_exit()

    def close(self) -> None:
        self.handle.close()
        if isinstance(self._keep, GpuBuffer):
            self._keep.close()


def _named(s: Slot) -> dict[str, Any]:
    return {**s.wire(), "name": s.name}


def _wide(dtype: str) -> str:
    return "float64" if DTYPES[dtype].is_floating_point else dtype


def _text(s: str) -> str:
    return text.clean(s, 1500)


def _tensor_wires(raw: Any) -> list[TensorWire]:
    """The problem's account of one shape's tensors, checked before the judge lays it out."""
    def bad(why: str) -> Exception:
        return infrastructure("reference_failed", f"the problem process reported a layout "
                              f"kgrader cannot use: {why}")

    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_TENSORS:
        raise bad(f"not a list of 1..{MAX_TENSORS} tensors")
    out: list[TensorWire] = []
    for t in raw:
        if not isinstance(t, dict):
            raise bad("a tensor that is not an object")
        name, role, dtype, shape = t.get("name"), t.get("role"), t.get("dtype"), t.get("shape")
        if not isinstance(name, str) or not name.isidentifier() or len(name) > 64:
            raise bad(f"tensor name {str(name)[:40]!r}")
        if role not in ("input", "output") or dtype not in DTYPES:
            raise bad(f"tensor {name}: role {str(role)[:20]!r}, dtype {str(dtype)[:20]!r}")
        if not isinstance(shape, list) or len(shape) > 16 or \
                not all(type(d) is int and 0 <= d < 1 << 40 for d in shape):
            raise bad(f"tensor {name}: shape {str(shape)[:80]}")
        if math.prod(shape) > MAX_ELEMENTS:
            raise bad(f"tensor {name}: {math.prod(shape)} elements")
        out.append(TensorWire(name, role, dtype, tuple(shape)))
    if len({w.name for w in out}) != len(out):
        raise bad("two tensors of one name")
    if not any(w.role == "output" for w in out):
        raise bad("no output tensor")
    return out


def make_problem(task: TaskWire, reference: str, dev: str, rng: random.Random) -> Problem:
    """The task's problem; ``rng`` (the secret phase stream) seeds what the judge draws."""
    if not convention(task.contract).takes_problem:
        return RemoteProblem(task, reference, dev, 0)
    if task.problem is None:
        raise infrastructure("bad_request", f"a {task.contract} task without its problem names")
    return RemoteProblem(task, reference, dev, rng.getrandbits(31))
