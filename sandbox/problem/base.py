"""The reference behind a task: one interface, as the judge's stages use it.

One interface for every contract (:data:`sandbox.contract.wire.Contract`): where the tensors of a
shape live (``layout``), fresh inputs from a seed, the reference's outputs, the problem's
own checker, and what the runner must be told. The judge's implementation is
:class:`sandbox.problem.host.RemoteProblem`: problem code runs in a process of its own,
as an untrusted principal (:mod:`sandbox.problem.handle`). The in-process
implementations, which that process runs, are :class:`DpsProblem` here (kgrader's own
destination-passing task) and the field formats (KernelBench modules, GPU MODE
functions) in :mod:`sandbox.problem.field`; :func:`sandbox.problem.field.local_problem` picks one.
"""

from __future__ import annotations

import abc
from typing import Any

import torch

from sandbox.contract.wire import TaskWire
from sandbox.problem.tensors import DTYPES, Slot, layout, poison
from sandbox.problem.tensors import make_input as _make_input


class Problem(abc.ABC):
    """The judge's view of a task's reference. Subclasses fill in the contract."""

    returns: bool = False  # outputs are returned by the call, not written into buffers

    def __init__(self, task: TaskWire, dev: str):
        self.task, self.dev = task, dev
        self.scratch: frozenset[str] = frozenset()  # inputs the candidate may write
        self._asked: tuple[list[Slot], int] | None = None  # send_inputs_and_reference()

    @abc.abstractmethod
    def layout(self, dims: dict[str, int]) -> list[Slot]:
        """Where every tensor of one shape lives in the shared buffer."""

    @abc.abstractmethod
    def inputs(self, slots: list[Slot], seed: int) -> dict[str, torch.Tensor]:
        """Fresh inputs for ``slots`` from ``seed`` (a seed the candidate never sees)."""

    @abc.abstractmethod
    def reference(self, slots: list[Slot], inputs: dict[str, torch.Tensor],
                  float64: bool = False) -> dict[str, torch.Tensor]:
        """The reference's outputs; ``float64``: evaluated in float64 (``task check``)."""

    def ask_exit(self) -> None:
        """Tell a problem process to exit without waiting (:meth:`close` waits); nothing
        here."""
        return None

    def device_ahead(self) -> None:
        """Start creating this problem's CUDA context where that takes a process of its own
        (:class:`sandbox.problem.host.RemoteProblem`); nothing here."""
        return None

    def device_done(self) -> None:
        """Wait for :meth:`device_ahead`'s work; nothing here."""
        return None

    def inputs_and_reference(self, slots: list[Slot], seed: int
                             ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """:meth:`inputs` from ``seed`` and the :meth:`reference`'s outputs for them (a
        problem process answers both in one round trip)."""
        inputs = self.inputs(slots, seed)
        return inputs, self.reference(slots, inputs)

    def send_inputs_and_reference(self, slots: list[Slot], seed: int) -> None:
        """Ask for :meth:`inputs_and_reference` now, to take it later
        (:meth:`take_inputs_and_reference`): a problem served by a process of its own works
        on it meanwhile; here it is only remembered."""
        self._asked = (slots, seed)

    def take_inputs_and_reference(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The answer to :meth:`send_inputs_and_reference`."""
        if self._asked is None:
            raise RuntimeError("take_inputs_and_reference() without a request")
        (slots, seed), self._asked = self._asked, None
        return self.inputs_and_reference(slots, seed)

    def call_slots(self, slots: list[Slot]) -> list[Slot]:
        """The slots the runner's views are made of, in call order."""
        return slots

    def call_data(self, slots: list[Slot]) -> Any:
        """What the runner needs beyond the views to build the call (None: nothing)."""
        return None

    def verify(self, slots: list[Slot], inputs: dict[str, torch.Tensor],
               outputs: dict[str, torch.Tensor]) -> str | None:
        """The problem's own checker, after kgrader's comparison passed: why it rejects
        the outputs, or None."""
        return None

    def runner_setup(self) -> dict[str, Any]:
        """Fields added to every runner's setup message."""
        return {}

    def harness_processes(self) -> dict[int, int]:
        """pid -> uid of the processes serving this problem (the harness's, not a side's)."""
        return {}

    def close(self) -> None:
        """Stop what serves this problem (its process)."""
        return None


class DpsProblem(Problem):
    """``launch(*inputs, *outputs)`` on tensors the task declares, inputs from its init specs."""

    def __init__(self, task: TaskWire, reference: str, dev: str):
        super().__init__(task, dev)
        ns: dict[str, Any] = {"__name__": "kgrader_reference"}
        exec(compile(reference, "reference.py", "exec"), ns)  # in the problem process only
        self.ref = ns[task.entrypoint]
        self.specs = {t.name: t for t in task.tensors}

    def layout(self, dims: dict[str, int]) -> list[Slot]:
        return layout(self.task.tensors, dims)

    def inputs(self, slots: list[Slot], seed: int) -> dict[str, torch.Tensor]:
        g = torch.Generator(device=self.dev)
        g.manual_seed(seed)
        return {s.name: _make_input(self.specs[s.name], s.shape, self.dev, g, s.dtype)
                for s in slots if s.role == "input"}

    def reference(self, slots: list[Slot], inputs: dict[str, torch.Tensor],
                  float64: bool = False) -> dict[str, torch.Tensor]:
        def wide(dtype: str) -> torch.dtype:
            d = DTYPES[dtype]
            return torch.float64 if float64 and d.is_floating_point else d

        outs = {s.name: torch.empty(s.shape, dtype=wide(s.dtype), device=self.dev)
                for s in slots if s.role == "output"}
        for o in outs.values():
            poison(o)
        args = [_widen(inputs[s.name].clone(), float64) if s.role == "input" else outs[s.name]
                for s in slots]
        self.ref(*args)
        if self.dev == "cuda":
            torch.cuda.synchronize()
        return outs


def _widen(t: torch.Tensor, float64: bool) -> torch.Tensor:
    return t.to(torch.float64) if float64 and t.dtype.is_floating_point else t
