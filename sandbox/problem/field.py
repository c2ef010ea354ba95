"""Problems from the field, in process: KernelBench modules and GPU MODE functions.

This code executes the problem's source: it runs only in the problem process
(:mod:`sandbox.problem.serve`), an untrusted principal, never in the judge.

Both formats make their inputs with the trusted reference's own generator and take the
candidate's outputs as return values. The judge calls the generator once per shape at
layout time to learn the tensors' shapes and dtypes (and runs the reference once for the
outputs'), gives every tensor a slot in the shared buffer, and from then on draws fresh
inputs from secret seeds exactly like a destination-passing task: the generator is
seeded (torch's global RNG, and GPU MODE's seed argument) with the judge's seed.
"""

from __future__ import annotations

import abc
import json
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from sandbox.contract.conventions import convention
from sandbox.contract.failure import infrastructure
from sandbox.contract.wire import ProblemWire, TaskWire, TensorWire
from sandbox.problem import buffers
from sandbox.problem.base import DpsProblem, Problem
from sandbox.problem.pytree import Template, UnsupportedValue, flatten, rebuild, returned_tensors
from sandbox.problem.tensors import DTYPES, Slot, layout
from sandbox.runner.returned import install_modules

T = TypeVar("T")
_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


@dataclass(frozen=True)
class _Layout:
    dims: dict[str, int]
    slots: list[Slot]
    in_template: Template
    in_names: list[str]
    out_names: list[str]
    out_single: bool  # the reference returned one tensor, not a tuple of them


def _guard(what: str, fn: Callable[[], T]) -> T:
    """Run problem code; its failure is the task's (an infrastructure fault)."""
    try:
        return fn()
    except UnsupportedValue as e:
        raise infrastructure("reference_failed", f"the problem's {what} produced {e}, which "
                             "kgrader cannot hand to a runner") from None
    except Exception as e:
        if "cuda" in str(e).lower() and not torch.cuda.is_available():
            raise infrastructure("needs_cuda", f"the problem's {what} needs a CUDA device and "
                                 "this evaluation runs on the CPU, where torch has none: run "
                                 "it on a GPU machine with --device cuda "
                                 f"({type(e).__name__}: {str(e)[:160]})") from None
        raise infrastructure("reference_failed",
                             f"the problem's {what} failed: {type(e).__name__}: {e}") from None


def _lookup(ns: dict[str, Any], name: str, what: str) -> Any:
    obj = ns.get(name)
    if not callable(obj):
        raise infrastructure("reference_failed", f"the problem's reference file defines no "
                             f"callable {name!r} ({what})")
    return obj


def _wires(prefix: str, role: str, tensors: list[torch.Tensor], what: str) -> list[TensorWire]:
    out = []
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise infrastructure("reference_failed", f"the problem's {what} returned a "
                                 f"{type(t).__name__} where kgrader expects tensors")
        name = _DTYPE_NAMES.get(t.dtype)
        if name is None:
            raise infrastructure("unsupported_dtype", f"the problem's {what} made a {t.dtype} "
                                 "tensor; kgrader supports " + ", ".join(DTYPES))
        out.append(TensorWire(name=f"{prefix}{i}", role=role, dtype=name,  # type: ignore[arg-type]
                              shape=tuple(int(d) for d in t.shape)))
    return out


class ReturnedProblem(Problem):
    """Inputs from the reference's generator, outputs returned by the call."""

    returns = True
    star = False  # the runner calls ``fn(*data)`` (a module's forward) or ``fn(data)``

    def __init__(self, task: TaskWire, dev: str, init_seed: int):
        super().__init__(task, dev)
        assert task.problem is not None
        self.pw: ProblemWire = task.problem
        self.init_seed = init_seed
        self._by_dims: dict[tuple[tuple[str, int], ...], _Layout] = {}
        self._by_slots: dict[tuple[Slot, ...], _Layout] = {}
        self._scratch: set[str] = set()
        self.notes: list[str] = []  # how the layout was decided, for the record

    # ---- the contract's two calls into problem code --------------------------------
    @abc.abstractmethod
    def _generate(self, dims: dict[str, int], seed: int) -> Any:
        """The trusted generator's data for one shape, seeded with ``seed``."""

    @abc.abstractmethod
    def _call_reference(self, data: Any, float64: bool) -> Any:
        """The trusted reference's returned outputs for ``data``."""

    # ---- layout ----------------------------------------------------------------------
    def layout(self, dims: dict[str, int]) -> list[Slot]:
        key = tuple(sorted(dims.items()))
        lay = self._by_dims.get(key)
        if lay is None:
            lay = self._make_layout(dict(dims))
            self._by_dims[key] = lay
            self._by_slots[tuple(lay.slots)] = lay
        return lay.slots

    def _make_layout(self, dims: dict[str, int]) -> _Layout:
        data = _guard("input generator", lambda: self._generate(dims, self.init_seed ^ 0x5EED))
        template, ins = _guard("input generator", lambda: flatten(data))
        in_wires = _wires("in", "input", ins, "input generator")
        ins = [t.to(self.dev) for t in ins]
        out = _guard("reference", lambda: self._call_reference(rebuild(template, ins), False))
        outs = returned_tensors(out)
        out_wires = _wires("out", "output", outs, "reference")
        if not out_wires:
            raise infrastructure("reference_failed", "the problem's reference returned no tensor")
        slots = layout([*in_wires, *out_wires], dims)
        lay = _Layout(dims, slots, template, [w.name for w in in_wires],
                      [w.name for w in out_wires], isinstance(out, torch.Tensor))
        holes = self._scratch_holes(template)
        found = self._classify(template, ins, set(holes))
        if found is not None:
            holes = found.writable
            note = "generated tensors by behaviour: " + buffers.describe(lay.in_names, found)
            if note not in self.notes:
                self.notes.append(note)
        self._scratch |= {lay.in_names[i] for i in holes}
        self.scratch = frozenset(self._scratch)
        return lay

    def _classify(self, template: Template, ins: list[torch.Tensor], guessed: set[int]
                  ) -> buffers.Classified | None:
        """Which generated tensors are output buffers, by the reference's behaviour
        (:mod:`sandbox.problem.buffers`); None: the task's ``scratch`` positions decide."""
        return None

    def _scratch_holes(self, template: Template) -> list[int]:
        """Tensor indices at the top-level positions ``pw.scratch`` names."""
        items = template.get("tuple") or template.get("list")
        if items is None:
            return [template["tensor"]] if "tensor" in template and 0 in self.pw.scratch else []
        return [items[p]["tensor"] for p in self.pw.scratch
                if 0 <= p < len(items) and "tensor" in items[p]]

    def _of(self, slots: list[Slot]) -> _Layout:
        lay = self._by_slots.get(tuple(slots))
        if lay is None:  # pragma: no cover - slots always come from layout()
            raise infrastructure("judge_error", "slots that no layout made")
        return lay

    # ---- inputs and reference -----------------------------------------------------------
    def inputs(self, slots: list[Slot], seed: int) -> dict[str, torch.Tensor]:
        lay = self._of(slots)
        data = _guard("input generator", lambda: self._generate(lay.dims, seed))
        template, ins = _guard("input generator", lambda: flatten(data))
        if template != lay.in_template:
            raise infrastructure("reference_failed", "the problem's input generator returned "
                                 "another structure (or other non-tensor values) for another "
                                 "seed: kgrader cannot lay it out once per shape")
        out = {}
        for name, t in zip(lay.in_names, ins, strict=True):
            self._expect(slots, name, t, "input generator")
            out[name] = t.to(self.dev)
        return out

    def reference(self, slots: list[Slot], inputs: dict[str, torch.Tensor],
                  float64: bool = False) -> dict[str, torch.Tensor]:
        lay = self._of(slots)
        # No clone: ``inputs`` are the caller's own copies (the server reads them fresh from
        # the buffer for every call), and a big problem's inputs are held once less.
        data = rebuild(lay.in_template, [_widen(inputs[n], float64) for n in lay.in_names])
        out = _guard("reference", lambda: self._call_reference(data, float64))
        outs = returned_tensors(out)
        if len(outs) != len(lay.out_names):
            raise infrastructure("reference_failed", f"the problem's reference returned "
                                 f"{len(outs)} tensors, {len(lay.out_names)} at layout time")
        result = {}
        for name, t in zip(lay.out_names, outs, strict=True):
            self._expect(slots, name, t, "reference", check_dtype=not float64)
            result[name] = t.detach().to(self.dev)
        if self.dev == "cuda":
            torch.cuda.synchronize()
        return result

    @staticmethod
    def _expect(slots: list[Slot], name: str, t: Any, what: str, check_dtype: bool = True) -> None:
        slot = next(s for s in slots if s.name == name)
        ok = isinstance(t, torch.Tensor) and tuple(t.shape) == slot.shape and \
            (not check_dtype or t.dtype == DTYPES[slot.dtype])
        if not ok:
            got = f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise infrastructure("reference_failed", f"the problem's {what} made {name} as "
                                 f"{got}, not {slot.shape} {slot.dtype} as at layout time")

    # ---- what the runner is told -----------------------------------------------------
    def call_slots(self, slots: list[Slot]) -> list[Slot]:
        return [s for s in slots if s.role == "input"]

    def call_data(self, slots: list[Slot]) -> Any:
        return {"template": self._of(slots).in_template, "star": self.star}

    def runner_setup(self) -> dict[str, Any]:
        return {"contract": self.task.contract, "modules": dict(self.pw.modules)}


def _widen(t: torch.Tensor, float64: bool) -> torch.Tensor:
    return t.to(torch.float64) if float64 and t.dtype.is_floating_point else t


class ModuleProblem(ReturnedProblem):
    """KernelBench: ``Model(*get_init_inputs())(*get_inputs())``, sizes as module constants.

    A shape binds module-level constants of the problem file (``batch_size = 16``); the
    judge sets them before calling ``get_inputs``. Both models are built under the same
    init seed (the runner is told the seed and the init arguments, never the file)."""

    star = True

    def __init__(self, task: TaskWire, reference: str, dev: str, init_seed: int):
        super().__init__(task, dev, init_seed)
        self.ns: dict[str, Any] = {"__name__": "kgrader_reference"}
        _guard("reference file", lambda: exec(compile(reference, "reference.py", "exec"), self.ns))
        for name, what in ((self.pw.reference, "the model"), (self.pw.inputs, "the inputs"),
                           (self.pw.init, "the init inputs")):
            _lookup(self.ns, name, what)
        first = task.timed or task.tune[0]
        self.init_template = self._init_template(first)
        self.init_args = rebuild(self.init_template, [])
        self._models: dict[bool, Any] = {}

    def _init_template(self, dims: dict[str, int]) -> Template:
        self.ns.update(dims)
        init = _guard("get_init_inputs", lambda: list(self.ns[self.pw.init]()))
        template, tensors = _guard("get_init_inputs", lambda: flatten(init))
        if tensors:
            raise infrastructure("reference_failed", "get_init_inputs returned tensors; kgrader "
                                 "hands the runner plain values only")
        return template

    def _model(self, float64: bool) -> Any:
        if float64 not in self._models:
            def build() -> Any:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(self.init_seed)
                    m = self.ns[self.pw.reference](*self.init_args)
                m = m.to(self.dev)
                return m.double() if float64 else m
            self._models[float64] = _guard("Model constructor", build)
        return self._models[float64]

    def _generate(self, dims: dict[str, int], seed: int) -> Any:
        if self._init_template(dims) != self.init_template:
            raise infrastructure("reference_failed", f"get_init_inputs depends on a shape "
                                 f"constant varied in {dims}: the model would differ per shape")
        torch.manual_seed(seed)
        return tuple(self.ns[self.pw.inputs]())

    def _call_reference(self, data: Any, float64: bool) -> Any:
        with torch.no_grad():
            return self._model(float64)(*data)

    def runner_setup(self) -> dict[str, Any]:
        return {**super().runner_setup(), "init": self.init_template, "init_seed": self.init_seed}


class GpumodeProblem(ReturnedProblem):
    """GPU MODE: ``ref_kernel(generate_input(**args))``; ``check_implementation`` too."""

    def __init__(self, task: TaskWire, reference: str, dev: str, init_seed: int):
        super().__init__(task, dev, init_seed)
        _guard("support modules", lambda: install_modules(self.pw.modules))
        mod = types.ModuleType("reference")
        sys.modules["reference"] = mod
        _guard("reference file",
               lambda: exec(compile(reference, "reference.py", "exec"), mod.__dict__))
        self.ns = mod.__dict__
        _lookup(self.ns, self.pw.reference, "the reference kernel")
        _lookup(self.ns, self.pw.inputs, "the input generator")
        self.checker = _lookup(self.ns, self.pw.checker, "the checker") if self.pw.checker else None
        self._classified: dict[str, buffers.Classified] = {}

    def _generate(self, dims: dict[str, int], seed: int) -> Any:
        args: dict[str, Any] = {**dims, **self.pw.fixed_args}
        if self.pw.seed_arg:
            args[self.pw.seed_arg] = seed
        torch.manual_seed(seed)
        return self.ns[self.pw.inputs](**args)

    def _call_reference(self, data: Any, float64: bool) -> Any:
        return self.ns[self.pw.reference](data)

    def _classify(self, template: Template, ins: list[torch.Tensor], guessed: set[int]
                  ) -> buffers.Classified | None:
        key = json.dumps(template, sort_keys=True)
        if key not in self._classified:
            def call(ts: list[torch.Tensor]) -> Any:
                return self._call_reference(rebuild(template, ts), False)
            self._classified[key] = _guard("reference", lambda: buffers.classify(ins, call, guessed))
        return self._classified[key]

    def verify(self, slots: list[Slot], inputs: dict[str, torch.Tensor],
               outputs: dict[str, torch.Tensor]) -> str | None:
        if self.checker is None:
            return None
        lay = self._of(slots)
        data = rebuild(lay.in_template, [inputs[n].clone() for n in lay.in_names])
        outs = [outputs[n].clone() for n in lay.out_names]
        checker = self.checker
        verdict = _guard("check_implementation",
                         lambda: checker(data, outs[0] if lay.out_single else tuple(outs)))
        return _rejection(verdict)


def _rejection(verdict: Any) -> str | None:
    """GPU MODE checkers return ``(ok, message)``, an error string ("" passes) or a bool."""
    if isinstance(verdict, tuple) and verdict:
        ok, msg = bool(verdict[0]), (str(verdict[1]) if len(verdict) > 1 else "")
    elif isinstance(verdict, str):
        ok, msg = verdict == "", verdict
    else:
        ok, msg = verdict is None or bool(verdict), ""
    return None if ok else (msg[:1500] or "check_implementation rejected the output")


def local_problem(task: TaskWire, reference: str, dev: str, init_seed: int) -> Problem:
    """The task's problem in this process: its code runs here. Only the problem process
    (:mod:`sandbox.problem.serve`) calls it; the judge's is :mod:`sandbox.problem.host`'s."""
    if not convention(task.contract).takes_problem:
        return DpsProblem(task, reference, dev)
    return make_field_problem(task, reference, dev, init_seed)


# The problem class of each field calling convention (sandbox.contract.conventions), by its
# wire value: the one place the harness picks code by a task's contract.
FIELD_PROBLEMS: dict[str, type[ModuleProblem] | type[GpumodeProblem]] = {
    "module": ModuleProblem, "gpumode": GpumodeProblem}


def make_field_problem(task: TaskWire, reference: str, dev: str, init_seed: int) -> Problem:
    if task.problem is None:
        raise infrastructure("bad_request", f"a {task.contract} task without its problem names")
    cls = FIELD_PROBLEMS.get(task.contract)
    if cls is None:
        raise infrastructure("bad_request", f"a {task.contract} task: the harness has no "
                             "problem class for that contract")
    return cls(task, reference, dev, init_seed)
