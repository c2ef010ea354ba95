"""Where a kernel-only launch stops running candidate code: the twin boundary.

Runner side. The twins (:mod:`sandbox.runner.twin`) hand the candidate's host code decoys
and give the judge's tensors only to its Triton kernels. That holds only if no candidate
callable runs once the real tensors are in the launch's hands, and Triton calls a lot of
host code of the candidate's inside its own ``run``: the ``grid`` callable (with the bound
arguments), ``add_pre_run_hook`` hooks, the runtime knobs' launch, load and compile hooks
(whose launch metadata evaluates the kernel's own ``launch_metadata`` callable on the
arguments), the ``triton.set_allocator`` allocator, and any Python object among the
arguments (``__index__``, ``__eq__``, properties of a tensor subclass, constexpr objects
the interpreter calls). Each of them, given a real tensor, could compute the answer in
Python or keep the tensor for later.

So a launch is taken apart before the swap, on the decoy side:

1. every argument is rebuilt from **exact, trusted types**: ``torch.Tensor`` (the twin is
   always a plain tensor), ``int``/``float``/``bool``/``str``/``None`` (subclasses and
   numpy scalars converted to the exact type), ``torch.dtype``, Triton's own dtypes,
   ``tl.constexpr`` of those, Triton kernels, tuples and lists of those, namedtuples
   (rebuilt as a harness-made namedtuple of the same name and fields), Triton's host
   ``TensorDescriptor`` and ``TensorWrapper``. Anything else is refused with a message
   (``kernel_argument_unsupported``), never silently given decoys;
2. a callable ``grid`` is called on the decoy-side bound arguments and must give one to
   three integers; ``pre_run_hooks`` run on the decoy-side arguments;
3. the first launch of a kernel for a layout compiles on the decoys (``warmup``), so
   compile-time candidate code (``constexpr_function`` helpers) never runs beside the
   real tensors either;
4. the real launch runs Triton's own ``run`` with the plain grid, no pre-run hook, every
   runtime hook unset, the harness's own scratch allocator, and the torch dispatch modes
   off (the op audit does not see Triton's own copies); before it, the **seal** checks
   that the classes and modules on Triton's launch path still hold the functions (and
   code objects) they held before the candidate was imported.

After step 4 starts, the only code that runs is Triton's and torch's. What the boundary
does not cover: a candidate (scan off) that patches the *state* of Triton objects the seal
does not list (a compiled kernel's launcher instance), walks the garbage collector or
frames to the runner's own objects, or, under the CPU interpreter, a kernel body that is
itself Python (the interpreter runs it as such). ``docs/security-review.md`` lists these
with the layer that covers them.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import operator
import os
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

_SCALARS = frozenset({int, float, bool, str, type(None)})
_MAX_DEPTH = 8
_MAX_ITEMS = 256
_NAMEDTUPLE: Callable[..., type] = collections.namedtuple


class TwinError(RuntimeError):
    """A kernel argument, grid or hook the boundary cannot make safe (the candidate's failure)."""


class SealBroken(RuntimeError):
    """Triton's launch path was changed after the harness sealed it."""


# ---- the seal --------------------------------------------------------------------------
# What the real launch runs: Triton's run, compile and launcher code and the globals they
# look up at call time. The autotuner, heuristics and knobs run on the decoy side (before
# the boundary) or are replaced for the launch (``quiet``), so they are not sealed.
_SEALED_MODULES = ("triton.runtime.jit", "triton.compiler.compiler", "triton.runtime.interpreter",
                   "triton.runtime._allocation", "triton.runtime.driver",
                   "triton.backends.nvidia.driver")
_SEALED_CLASSES = ("JITFunction", "InterpretedFunction", "GridExecutor", "CompiledKernel",
                   "TensorDescriptor", "TensorWrapper", "CudaLauncher", "CudaUtils", "CudaDriver",
                   "DriverConfig", "KernelInterface", "LazyDict", "ASTSource")


_CODE = operator.attrgetter("__code__")


def _one(key: str) -> Callable[[Any], tuple[Any]]:
    return lambda m: (m[key],)


class Seal:
    """Identities of everything callable on Triton's launch path (and the code objects of
    its functions), taken before the candidate is imported; :meth:`check` compares them at
    every real launch. One C-level look-up per namespace and a tuple comparison: tens of
    microseconds for a few hundred names."""

    def __init__(self) -> None:
        self._spaces: list[tuple[str, Any, Callable[[Any], Any], tuple[str, ...], tuple[int, ...]]] = []
        self._funcs: list[types.FunctionType] = []
        classes: dict[int, type] = {}
        # Only the launch path in use: the interpreter's under TRITON_INTERPRET, else the JIT's.
        off = (".jit", ".compiler", ".nvidia.driver") if os.environ.get("TRITON_INTERPRET") == "1" \
            else (".interpreter",)
        for name in _SEALED_MODULES:
            if name.endswith(off):
                continue
            mod = sys.modules.get(name)
            if mod is None:
                continue
            self._add(name, mod.__dict__)
            for v in vars(mod).values():
                if isinstance(v, type) and v.__name__ in _SEALED_CLASSES:
                    classes[id(v)] = v
        for cls in classes.values():
            for klass in cls.__mro__[:-1]:  # object's own slots cannot be reassigned
                self._add(f"{klass.__module__}.{klass.__qualname__}", klass.__dict__)
        drv = sys.modules.get("triton.runtime.driver")
        self._driver = getattr(drv, "driver", None)
        self._active = 0
        if self._driver is not None and ".jit" not in off:
            # The JIT's path asks the active driver for the device, the stream and the
            # launcher: made now (the runner's CUDA is up), so a driver the candidate sets
            # later, or a method it puts on this one, breaks the seal.
            try:
                active = self._driver.active
            except Exception:  # no GPU driver here: nothing of it runs
                active = None
            if active is not None:
                self._active = id(active)
                self._add("triton.runtime.driver.active", active.__dict__)
                utils = active.__dict__.get("utils")
                if utils is not None:
                    self._add("triton.runtime.driver.active.utils", utils.__dict__)
        self._codes = tuple(map(id, map(_CODE, self._funcs)))

    def _add(self, where: str, d: Any) -> None:
        keys = tuple(k for k, v in d.items() if callable(v) or isinstance(v, types.ModuleType))
        if not keys:
            return
        self._funcs.extend(v for k in keys if isinstance(v := d[k], types.FunctionType)
                           and str(getattr(v, "__module__", "")).startswith("triton."))
        get: Callable[[Any], Any] = operator.itemgetter(*keys) if len(keys) > 1 else _one(keys[0])
        self._spaces.append((where, d, get, keys, tuple(id(d[k]) for k in keys)))

    def check(self) -> None:
        for where, d, get, keys, ids in self._spaces:
            try:
                now = tuple(map(id, get(d)))
            except KeyError:
                now = ()
            if now != ids:
                gone = [k for k, i in zip(keys, ids, strict=True) if id(d.get(k)) != i]
                raise SealBroken(f"{where}.{(gone or ['?'])[0]} was replaced after the harness sealed "
                                 "Triton's launch path")
        if tuple(map(id, map(_CODE, self._funcs))) != self._codes:
            raise SealBroken("the code of a function on Triton's launch path was replaced")
        if self._driver is not None and self._active and \
                id(self._driver.__dict__.get("_active")) != self._active:
            raise SealBroken("triton.runtime.driver.active was replaced")


# ---- arguments -------------------------------------------------------------------------
class Plain:
    """Rebuilds launch arguments from exact, trusted types (decoy side and kernel side)."""

    def __init__(self) -> None:
        import triton
        import triton.language as tl

        self._tl = tl
        self._constexpr: type = tl.constexpr
        self._kernel_types = tuple(_triton_class(p) for p in (
            "triton.runtime.jit.JITFunction", "triton.runtime.interpreter.InterpretedFunction",
            "triton.runtime.autotuner.Autotuner", "triton.runtime.autotuner.Heuristics")
            if _triton_class(p) is not None)
        self._dtype_types = frozenset(
            v for v in vars(sys.modules["triton.language.core"]).values()
            if isinstance(v, type) and issubclass(v, tl.dtype))
        self._desc = _triton_class("triton.tools.tensor_descriptor.TensorDescriptor")
        self._wrapper = getattr(triton, "TensorWrapper", None) or \
            _triton_class("triton.runtime.jit.TensorWrapper")
        self._namedtuples: dict[tuple[str, tuple[str, ...]], type] = {}
        self._namedtuples_made: set[type] = set()

    def plain(self, a: Any, depth: int = 0) -> Any:
        """Launch argument ``a`` rebuilt from exact, trusted types (the decoy side). The
        only step that may run candidate code (conversions), so it runs before any twin."""
        t = type(a)
        if t in _SCALARS or t is torch.dtype or t is torch.device or t in self._dtype_types \
                or t is torch.Size:  # a Size holds plain ints (a descriptor's shape)
            return a
        if isinstance(a, torch.Tensor):
            return a
        if depth >= _MAX_DEPTH:
            raise TwinError("a kernel argument nests deeper than kgrader rebuilds")
        if t is self._constexpr:
            return self._constexpr(self.plain(a.value, depth + 1))
        if self._kernel_types and t in self._kernel_types:
            return a
        if t is tuple or t is list:
            items = list.__iter__(a) if t is list else tuple.__iter__(a)
            return t(self.plain(x, depth + 1) for x in _capped(items))
        if isinstance(a, tuple):
            return self._namedtuple(a, t, depth)
        if self._desc is not None and t is self._desc:
            return self._descriptor(a, depth)
        if self._wrapper is not None and t is self._wrapper:
            base = object.__getattribute__(a, "base")
            if not isinstance(base, torch.Tensor):
                raise TwinError("a TensorWrapper must wrap a tensor")
            return self._wrapper(base, self.plain(object.__getattribute__(a, "dtype"), depth + 1))
        if isinstance(a, int) or (hasattr(t, "__index__") and not hasattr(a, "data_ptr")):
            return int.__int__(operator.index(a))  # numpy integers, int subclasses: plain int
        if isinstance(a, float):
            return float.__float__(a)
        raise TwinError(
            f"a kernel argument of type {t.__name__} cannot be handed to a kernel in a kernel-only "
            "task: kgrader passes tensors, numbers, strings, dtypes, constexprs, Triton kernels, "
            "tuples, lists and namedtuples of those, and Triton's TensorDescriptor")

    def real(self, p: Any, twin: Callable[[torch.Tensor], torch.Tensor]) -> Any:
        """The kernels' side of plain argument ``p`` (:meth:`plain`'s output): every tensor
        replaced by ``twin(tensor)``. Walks only exact harness and Triton types."""
        t = type(p)
        if isinstance(p, torch.Tensor):
            return twin(p)
        if t is tuple or t is list:
            return t(self.real(x, twin) for x in p)
        if t is self._constexpr:
            return self._constexpr(self.real(p.value, twin))
        if t in self._namedtuples_made:
            return t(*(self.real(x, twin) for x in p))
        if self._desc is not None and t is self._desc:
            return dataclasses.replace(p, base=twin(p.base))
        if self._wrapper is not None and t is self._wrapper:
            return self._wrapper(twin(p.base), p.dtype)
        return p

    def _namedtuple(self, a: Any, t: type, depth: int) -> Any:
        fields = getattr(t, "_fields", None)
        if not isinstance(fields, tuple) or not all(type(f) is str for f in fields):
            raise TwinError(f"a kernel argument of type {t.__name__} is a tuple subclass that is "
                            "not a namedtuple")
        made: Any = self._namedtuples.get((t.__name__, fields))
        if made is None:
            try:
                made = _NAMEDTUPLE(t.__name__, fields)
            except ValueError as e:
                raise TwinError(f"a namedtuple argument kgrader cannot rebuild: {e}") from None
            self._namedtuples[(t.__name__, fields)] = made
            self._namedtuples_made.add(made)
        values = [self.plain(x, depth + 1) for x in _capped(tuple.__iter__(a))]
        if len(values) != len(fields):
            raise TwinError(f"namedtuple {t.__name__} holds {len(values)} values for {len(fields)} fields")
        return made(*values)

    def _descriptor(self, a: Any, depth: int) -> Any:
        assert self._desc is not None
        values: dict[str, Any] = {}
        for f in dataclasses.fields(self._desc):
            v = object.__getattribute__(a, f.name)
            values[f.name] = v if f.name == "base" else self.plain(v, depth + 1)
        if not isinstance(values["base"], torch.Tensor):
            raise TwinError("a TensorDescriptor's base must be a tensor")
        return self._desc(**values)


def _capped(items: Iterator[Any]) -> list[Any]:
    out = []
    for x in items:
        out.append(x)
        if len(out) > _MAX_ITEMS:
            raise TwinError(f"a kernel argument holds more than {_MAX_ITEMS} items")
    return out


def _triton_class(path: str) -> Any:
    mod, _, name = path.rpartition(".")
    m = sys.modules.get(mod)
    return getattr(m, name, None) if m is not None else None


# ---- grid and hooks ----------------------------------------------------------------------
def bound_arguments(kernel: Any, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The kernel's parameters as Triton hands them to a grid callable (name -> value,
    defaults applied), from the decoy side."""
    sig = getattr(kernel, "signature", None)
    if not isinstance(sig, inspect.Signature):
        sig = inspect.signature(kernel.fn)
    names = list(sig.parameters)
    bound = dict(zip(names, args, strict=False))
    for name in names[len(args):]:
        if name in kwargs:
            bound[name] = kwargs[name]
        else:
            default = sig.parameters[name].default
            if default is not inspect.Parameter.empty:
                bound[name] = default
    return bound


def plain_grid(grid: Any) -> tuple[int, ...]:
    """A grid as one to three plain integers."""
    if type(grid) not in (tuple, list):
        raise TwinError(f"the launch grid is a {type(grid).__name__}: it must be a tuple "
                            "of one to three integers (or a callable returning one)")
    dims = list(grid)
    if not 1 <= len(dims) <= 3:
        raise TwinError(f"the launch grid has {len(dims)} dimensions: one to three are allowed")
    try:
        return tuple(int.__int__(operator.index(d)) for d in dims)
    except TypeError:
        raise TwinError("the launch grid must hold integers") from None


# ---- the quiet launch ---------------------------------------------------------------------
_HOOKS = ("launch_enter_hook", "launch_exit_hook", "kernel_load_start_hook", "kernel_load_end_hook",
          "kernel_unload_hook", "jit_cache_hook", "jit_post_compile_hook", "add_stages_inspection_hook")


def _scratch(size: int, alignment: int, stream: Any) -> torch.Tensor:
    """The harness's allocator for a kernel's global scratch (device-side descriptors)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")  # torch aligns to 512 bytes


@contextmanager
def quiet(kernel: Any) -> Iterator[None]:
    """No candidate callable Triton would call during a launch: pre-run hooks, runtime
    hooks, the allocators, an asynchronous compile mode. Restored afterwards (the candidate's launcher may use them on
    its own decoys again)."""
    runtime = getattr(sys.modules.get("triton.knobs"), "runtime", None)
    saved = {h: runtime.__dict__[h] for h in _HOOKS if runtime is not None and h in runtime.__dict__}
    hooks = kernel.__dict__.get("pre_run_hooks")
    alloc = sys.modules.get("triton.runtime._allocation")
    token = alloc._allocator.set(_scratch) if alloc is not None else None
    compiling = getattr(sys.modules.get("triton.runtime._async_compile"), "active_mode", None)
    sync = compiling.set(None) if compiling is not None else None  # no candidate compile pool
    profile = alloc._profile_allocator.get() if alloc is not None else None
    try:
        if runtime is not None:
            for h in _HOOKS:
                if hasattr(runtime, h):
                    object.__setattr__(runtime, h, None)
        if hooks is not None:
            kernel.__dict__["pre_run_hooks"] = []
        if alloc is not None:
            alloc._profile_allocator.set(alloc._NULL_ALLOCATOR)
        yield
    finally:
        if runtime is not None:
            for h in _HOOKS:
                if h in saved:
                    object.__setattr__(runtime, h, saved[h])
                elif h in runtime.__dict__:
                    del runtime.__dict__[h]
        if hooks is not None:
            kernel.__dict__["pre_run_hooks"] = hooks
        if alloc is not None:
            alloc._allocator.reset(token)
            alloc._profile_allocator.set(profile)
        if compiling is not None:
            compiling.reset(sync)


__all__ = ["Plain", "Seal", "SealBroken", "TwinError", "bound_arguments", "plain_grid", "quiet"]
