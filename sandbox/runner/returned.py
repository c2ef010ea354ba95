"""Returned-output contracts, runner side: build the entry, call it, hand the outputs over.

A KernelBench ``ModelNew`` or a GPU MODE ``custom_kernel`` returns its outputs. The runner
times only the call (the same :class:`sandbox.runner.timing.Timer` as ever), keeps what it
returned, and copies it into the judge's output slots when the judge asks (``collect``),
outside the timed region. The judge decides from its own memory, as for any task: a
wrong count, shape or dtype of returned tensors is the candidate's correctness failure
(``output_shape_mismatch``), and outputs never copied stay poisoned.

What the copy uses is bound here, before the candidate is imported: a candidate that
patches ``Tensor.copy_`` later does not reach it. Work deferred into the copy is refused:
only plain tensors are accepted (no subclass whose data is computed when read), and no
torch mode may be left active around the copy.
"""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from sandbox.contract.conventions import NATIVE, convention
from sandbox.problem.pytree import rebuild

_copy = torch.Tensor.copy_
_Tensor = torch.Tensor
_dispatch_depth = torch._C._len_torch_dispatch_stack
_function_depth = torch._C._len_torch_function_stack
_no_grad = torch.no_grad
_gc_enabled, _gc_disable, _gc_enable = gc.isenabled, gc.disable, gc.enable
_gettrace, _getprofile = sys.gettrace, sys.getprofile
_monitoring = getattr(sys, "monitoring", None)


def plain(obj: Any) -> list[Any]:
    """What a call returned, reduced inside the timed call to exact tuples/lists of what it
    held: nothing of the candidate's types is kept for :meth:`Returned.collect`, so no
    method of theirs (``__del__``, ``__iter__``, a lazy subclass) runs outside the timed
    region. Looks at exact types only (``type(x) is``), which runs no candidate code."""
    if type(obj) is tuple or type(obj) is list:
        return list(obj)
    return [obj]


def hooks_left() -> str | None:
    """Candidate code that would run inside the harness's own Python calls: a trace or
    profile function, or a ``sys.monitoring`` tool."""
    if _gettrace() is not None or _getprofile() is not None:
        return "a trace or profile function"
    if _monitoring is not None:
        for tool in range(6):
            if _monitoring.get_tool(tool) is not None:
                return f"sys.monitoring tool {tool}"
    return None


def install_modules(modules: dict[str, str]) -> None:
    """Make trusted helper modules (GPU MODE's ``utils``, ``task``) importable by name.

    Helpers may import each other, so each is retried until all load or none progresses."""
    pending = dict(modules)
    while pending:
        progressed = False
        for name, src in list(pending.items()):
            mod = types.ModuleType(name)
            sys.modules[name] = mod
            try:
                exec(compile(src, f"{name}.py", "exec"), mod.__dict__)  # trusted task code
            except ImportError:
                del sys.modules[name]
                continue
            del pending[name]
            progressed = True
        if not progressed:
            raise ImportError(f"helper module(s) {sorted(pending)} of the task could not be loaded")


class Returned:
    """One runner's returned-output contract (inactive for destination passing)."""

    def __init__(self, setup: dict[str, Any], device: str):
        # The harness's calling convention by its wire value; an unknown one is refused.
        self.convention = convention(str(setup.get("contract", NATIVE)))
        self.contract = self.convention.contract
        self.modules = {str(k): str(v) for k, v in dict(setup.get("modules") or {}).items()}
        self.init = setup.get("init", {"list": []})
        self.init_seed = int(setup.get("init_seed", 0))
        # GPU MODE, unless strict: a float output of another float dtype is copied (cast)
        # into the reference's slot and the problem's checker judges its values.
        self.cast_floats = setup.get("cast_floats") is True
        self.device = device
        self.last: list[Any] | None = None
        self._held: list[Any] = []  # collected outputs, released inside the next timed call

    @property
    def active(self) -> bool:
        return self.convention.returns_outputs

    def before_import(self) -> None:
        install_modules(self.modules)
        torch.set_grad_enabled(False)  # inference, as the references run

    def entry(self, mod: types.ModuleType, name: str) -> tuple[Any, str | None]:
        """The callable to time, or why there is none (a missing entry point)."""
        obj = getattr(mod, name, None)
        if not callable(obj):
            return None, f"candidate defines no callable {name!r}"
        if not self.convention.builds_entry:
            return obj, None
        # Built under the init seed the reference was built under, from the same values.
        torch.manual_seed(self.init_seed)
        model = obj(*rebuild(self.init, []))
        if isinstance(model, torch.nn.Module):
            model = model.to(self.device)
        if not callable(model):
            return None, f"{name}(...) built a {type(model).__name__}, which is not callable"
        return model, None

    def bind(self, fn: Any, data: dict[str, Any], views: list[torch.Tensor]) -> Callable[[], None]:
        """The timed call: only ``fn`` itself; what it returns is kept for :meth:`collect`."""
        args = rebuild(data["template"], views)
        self.last = None
        held = self._held
        self._held = []
        star = bool(data.get("star"))

        def call() -> None:
            # The last call's outputs are dropped here, inside the timed region: a
            # finalizer of theirs runs (and is timed) now, never while the judge checks.
            held.clear()
            self.last = plain(fn(*args) if star else fn(args))
        return call

    def collect(self, outs: list[torch.Tensor]) -> dict[str, Any] | None:
        """Copy the last call's returned tensors into ``outs``; an error reply, or None."""
        was = _gc_enabled()
        _gc_disable()  # no collection (and so no candidate __del__) until the copy is done
        try:
            return self._collect(outs)
        finally:
            if was:
                _gc_enable()

    def _collect(self, outs: list[torch.Tensor]) -> dict[str, Any] | None:
        got = self.last if self.last is not None else []
        self.last = None
        self._held = got  # kept alive until the next timed call (see bind)
        if _dispatch_depth() or _function_depth():
            return _err("mode_left_active", "the call left a torch dispatch or function mode "
                        "active: work could be deferred into the copy of its outputs")
        hook = hooks_left()
        if hook is not None:
            return _err("mode_left_active", f"the call left {hook} installed: its code would run "
                        "inside the copy of the outputs, outside the timed call")
        if len(got) != len(outs):
            return _err("output_shape_mismatch", f"the call returned {len(got)} tensor(s); the "
                        f"task expects {len(outs)} ({_shapes(outs)})")
        for i, (t, o) in enumerate(zip(got, outs, strict=True)):
            if type(t) is not _Tensor:
                return _err("output_shape_mismatch", f"output {i} is a {type(t).__name__}, not a "
                            "plain torch.Tensor")
            cast_ok = self.cast_floats and t.dtype.is_floating_point and o.dtype.is_floating_point
            if tuple(t.shape) != tuple(o.shape) or (t.dtype != o.dtype and not cast_ok):
                return _err("output_shape_mismatch", f"output {i} is {tuple(t.shape)} "
                            f"{_name(t.dtype)}; the reference's is {tuple(o.shape)} {_name(o.dtype)}")
        with _no_grad():
            for t, o in zip(got, outs, strict=True):
                _copy(o, t)
        if self.device == "cuda":
            torch.cuda.synchronize()
        return None


def _name(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def _shapes(ts: list[torch.Tensor]) -> str:
    return ", ".join(f"{tuple(t.shape)} {_name(t.dtype)}" for t in ts)


def _err(code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "type": "OutputContract", "message": message,
                                   "line": None}}
