"""Kernel-only launches: the candidate's host code sees decoys, only its kernels see the data.

Runner side. In a kernel-only task the answer must come from the candidate's Triton
kernels. Looking for forbidden compute is a deny-list in disguise (numpy on a zero-copy
view, ``.tolist()`` and Python arithmetic, host copies, torch with its dispatcher
switched off, a helper thread: none of these pass through the op audit). So the runner
makes that compute pointless instead of trying to see it:

- the entry point is called with **decoy tensors** (same shape, strides, dtype, device and
  pointer alignment as the judge's slots, filled with a constant pattern that says nothing
  about the inputs);
- every launch of a Triton kernel (``JITFunction.run``, the interpreter's ``run``; the
  autotuner and heuristics wrappers end there) has each tensor argument replaced by its
  **twin**: the judge's slot for a decoy, and for any other host tensor a kernel-side copy
  made at the launch, so that a kernel never writes memory the host code can read;
- the op audit (``sandbox.runner.op_audit``) **mirrors** every non-computing torch op that touches
  a decoy (allocation ``*_like``, fills, copies, dtype conversions, in-place writes) onto
  the twins, so that a launcher's ``out.zero_()`` before a split-K kernel or its
  ``x.float()`` before a kernel reaches the kernels' side too.

The host code can therefore compute only on decoys, and the judge's outputs are written
only by the candidate's kernels (or by mirrored copies of what those kernels wrote). A
kernel path that avoids the hook (a compiled kernel launched by hand) writes decoys and
fails the check: the design fails closed. What it cannot stop, with the scan off, is code
that finds the runner's own objects (``gc``) or raw pointers and writes through them
(``docs/security-review.md``).

Twins exist only while a call runs: a thread that launches after the reply gets no twin.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from sandbox.runner.boundary import _SCALARS, Plain, Seal, bound_arguments, plain_grid, quiet
from sandbox.runner.boundary import TwinError as TwinError

LEAD_CAP_US = 1000.0  # the most lead the boundary's host time may add per call

ALIGN = 512  # decoys keep the slot's pointer alignment modulo this (vectorised paths)
_FILL = 0xFF  # NaN for every float dtype, -1 for signed integers


@dataclasses.dataclass
class _Entry:
    real: torch.UntypedStorage  # the kernels' side
    delta: int  # byte offset on the real storage of byte 0 of the decoy-side storage
    keep: Any  # the decoy-side storage, held so that its address is not reused meanwhile
    slot: bool  # a judge's slot (persistent) rather than a per-call copy


class Twins:
    """The decoy <-> twin map of one runner (one candidate)."""

    def __init__(self) -> None:
        self._map: dict[int, _Entry] = {}
        # per layout key: the decoys, their (decoy, slot view) pairs, their map entries
        self._bound: dict[str, tuple[list[torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]],
                                     dict[int, _Entry]]] = {}
        # The launch path's fast lane: a decoy handed to a kernel as it is -> its slot view
        # (by identity; the decoy is held in the value, so its id is not reused).
        self._direct: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._lock = threading.RLock()
        self.active = False
        self.launches = 0  # launches whose arguments were twinned in the current call
        self.key = ""  # the current call's layout key
        self.real: set[int] = set()  # storages of the kernels' side (judge's slots, copies)
        self.copies = 0  # host tensors copied to the kernels' side in the current call
        # The boundary's own host time at each call's first launch, ns (candidate callables
        # and Triton's launch excluded): the timer queues that much more lead ahead of its
        # start event (lead_us), so that the harness's cost is never timed as device idle.
        self.first_boundary_ns: collections.deque[int] = collections.deque(maxlen=32)

    # ---- the call ------------------------------------------------------------------
    def bind(self, key: str, real: list[torch.Tensor]) -> list[torch.Tensor]:
        """The decoys for the judge's ``real`` views (cached per layout), map active.

        Runs inside the judge's round trip but not in the empty calls it is compared with
        (the escape check): a cached layout costs a few dictionary updates, no tensor op."""
        with self._lock:
            bound = self._bound.get(key)
            if bound is None or len(bound[1]) != len(real) or \
                    any(b[1] is not r for b, r in zip(bound[1], real, strict=True)):
                bound = self._prepare(key, real)
            decoys, direct, entries = bound
            self._direct = {id(d): (d, r) for d, r in direct}
            self._map.update(entries)
            self.real = {e.real.data_ptr() for e in entries.values()}
            self.key = key
            self.launches = self.copies = 0
            self.active = True
        return decoys

    def _prepare(self, key: str, real: list[torch.Tensor]) -> tuple[
            list[torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]], dict[int, _Entry]]:
        with _disable_current_modes():
            if len(self._bound) >= 8:
                self._drop_slots()
            decoys = [self._decoy(r) for r in real]
            entries = {_sptr(d): _Entry(r.untyped_storage(), _byte_off(r) - _byte_off(d),
                                        d.untyped_storage(), True)
                       for d, r in zip(decoys, real, strict=True)}
        direct = [(d, r) for d, r in zip(decoys, real, strict=True)]
        self._bound[key] = (decoys, direct, entries)
        return self._bound[key]

    def lead_us(self) -> float:
        """Device lead to add for the boundary's host time (1.5x its recent median, at most
        LEAD_CAP_US; 0 before any launch): on an H100 the boundary took ~128 us per launch,
        beyond the timer's fixed 100 us lead, and that gap was timed."""
        if not self.first_boundary_ns:
            return 0.0
        return min(LEAD_CAP_US, 1.5 * statistics.median(self.first_boundary_ns) / 1e3)

    def end(self) -> dict[str, int]:
        """Deactivate and forget this call's copies; what the call did, for the reply."""
        with self._lock:
            self.active = False
            self._direct = {}
            self._map = {k: e for k, e in self._map.items() if e.slot}
            self.real = set()
            return {"launches": self.launches, "copies": self.copies}

    def _drop_slots(self) -> None:
        self._bound.clear()
        self._map = {k: e for k, e in self._map.items() if not e.slot}

    @staticmethod
    def _decoy(real: torch.Tensor) -> torch.Tensor:
        nbytes = _extent(real)
        raw = torch.full((nbytes + 2 * ALIGN,), _FILL, dtype=torch.uint8, device=real.device)
        shift = (real.data_ptr() - raw.data_ptr()) % ALIGN
        d = torch.empty((0,), dtype=real.dtype, device=real.device)
        d.set_(raw.untyped_storage(), shift // real.element_size(), real.size(), real.stride())
        if shift % real.element_size():
            raise TwinError("a slot is not aligned to its element size")
        return d

    # ---- twins -----------------------------------------------------------------------
    def has(self, t: torch.Tensor) -> bool:
        return id(t) in self._direct or _sptr(t) in self._map

    def is_real(self, t: torch.Tensor) -> bool:
        """Whether ``t`` views the kernels' side (a judge's slot or a launch's copy): host
        code holding such a tensor got it around the boundary."""
        try:
            return _sptr(t) in self.real
        except (RuntimeError, NotImplementedError):  # no storage (meta, sparse): not a slot
            return False

    def twin(self, t: torch.Tensor) -> torch.Tensor:
        """The kernels' side of host tensor ``t`` (made now, by copy, if it has none)."""
        hit = self._direct.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        with self._lock:
            e = self._map.get(_sptr(t))
            if e is None:
                storage = t.untyped_storage()
                e = _Entry(storage.clone(), 0, storage, False)  # type: ignore[no-untyped-call]
                self._map[_sptr(t)] = e
                self.real.add(e.real.data_ptr())
                self.copies += 1
            off = _byte_off(t) + e.delta
            size = t.element_size()
            if off < 0 or off % size or off + _extent(t) > e.real.nbytes():
                raise TwinError("a kernel argument reaches outside the memory it views")
            out = torch.empty((0,), dtype=t.dtype, device=t.device)
            out.set_(e.real, off // size, t.size(), t.stride())
            return out

    def adopt(self, decoy_side: torch.Tensor, real_side: torch.Tensor) -> None:
        """``real_side`` is the twin of the new tensor ``decoy_side`` (a mirrored op's result)."""
        key = _sptr(decoy_side)
        with self._lock:
            if key not in self._map:
                self._map[key] = _Entry(real_side.untyped_storage(),
                                        _byte_off(real_side) - _byte_off(decoy_side),
                                        decoy_side.untyped_storage(), False)

    @contextmanager
    def launching(self) -> Iterator[None]:
        with _disable_current_modes():
            yield


def mirror(twins: Twins, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
    """Re-run non-computing op ``func`` on the twins of its tensor arguments (the op audit
    calls this for allowed ops, after running ``func`` itself on what the host code holds)."""
    if not twins.active:
        return
    flat_in = tensor_args(args, kwargs)
    if not any(twins.has(a) for a in flat_in):
        return  # host-only data: nothing of the kernels' side is involved
    flat_out = [o for o in _flat(out) if isinstance(o, torch.Tensor)]
    writes = _mutates(func)
    fresh = [o for o in flat_out if not twins.has(o)]
    if not writes and not fresh:
        return  # a view: it shares a twinned storage already
    with twins.launching():
        real_args, real_kwargs = _map_tree((args, kwargs), twins.twin)
        real_out = func(*real_args, **real_kwargs)
    for o, r in zip(flat_out, [x for x in _flat(real_out) if isinstance(x, torch.Tensor)],
                    strict=False):
        if not twins.has(o):
            twins.adopt(o, r)


def install(twins_of: Callable[[], Twins | None]) -> None:
    """Route every Triton launch through the twin boundary (idempotent; before the
    candidate's import: the seal is taken here)."""
    plain: Plain | None = None
    seal: Seal | None = None
    compiled: set[tuple[Any, ...]] = set()
    for cls in _kernel_classes():
        run = cls.__dict__.get("run")
        if run is None or getattr(run, "_kgrader_twins", False):
            continue

        def wrapped(self: Any, *args: Any, _run: Any = run, **kwargs: Any) -> Any:
            twins = twins_of()
            if twins is None or not twins.active:
                return _run(self, *args, **kwargs)
            assert plain is not None and seal is not None
            return _launch(twins, plain, seal, compiled, self, _run, args, kwargs)

        wrapped._kgrader_twins = True  # type: ignore[attr-defined]
        cls.run = wrapped  # type: ignore[attr-defined]
    plain, seal = Plain(), Seal()


def _launch(twins: Twins, plain: Plain, seal: Seal, compiled: set[tuple[Any, ...]], kernel: Any,
            run: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """One launch across the boundary (:mod:`sandbox.runner.boundary`): everything candidate
    code may see runs on the decoy side first; the real launch calls no candidate code."""
    t0 = time.perf_counter_ns()
    first = twins.launches == 0
    grid, warmup = kwargs.pop("grid", None), bool(kwargs.pop("warmup", False))
    dargs = [plain.plain(a) for a in args]
    dkw = {k: plain.plain(v) for k, v in kwargs.items()}
    other = 0  # ns in candidate callables, the compile and Triton's own launch
    if not warmup:
        t = time.perf_counter_ns()
        for hook in list(kernel.__dict__.get("pre_run_hooks") or ()):
            hook(*dargs, **dkw)
        if callable(grid):
            grid = grid(bound_arguments(kernel, dargs, dkw))
        other += time.perf_counter_ns() - t
        grid = plain_grid(grid)
    rargs = [plain.real(a, twins.twin) for a in dargs]  # no candidate code from here on
    rkw = {k: plain.real(v, twins.twin) for k, v in dkw.items()}
    key = (id(kernel), twins.key, tuple((k, v) for k, v in dkw.items() if type(v) in _SCALARS))
    with quiet(kernel):
        if key not in compiled and _compiles(kernel):
            t = time.perf_counter_ns()
            run(kernel, *dargs, grid=grid, warmup=True, **dkw)  # compile-time code sees decoys
            other += time.perf_counter_ns() - t
            compiled.add(key)
        seal.check()
        with twins.launching():
            t = time.perf_counter_ns()
            out = run(kernel, *rargs, grid=grid, warmup=warmup, **rkw)
            other += time.perf_counter_ns() - t
    twins.launches += 1
    if first:
        twins.first_boundary_ns.append(max(0, time.perf_counter_ns() - t0 - other))
    return out


def _compiles(kernel: Any) -> bool:
    """Whether a launch of ``kernel`` compiles (Triton's JIT; the interpreter compiles nothing)."""
    return hasattr(kernel, "device_caches")


def _kernel_classes() -> list[type]:
    classes: list[type] = []
    try:
        from triton.runtime.jit import JITFunction

        classes.append(JITFunction)
    except ImportError:
        pass
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:
        pass
    return classes


def tensor_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors among an op's arguments, one list level deep (allowed ops take no more)."""
    out: list[torch.Tensor] = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, list | tuple):
            out.extend(x for x in a if isinstance(x, torch.Tensor))
    return out


def _mutates(func: Any) -> bool:
    schema = getattr(func, "_schema", None)
    if schema is None:
        return True  # unknown: mirror it (a fill or copy run twice is harmless)
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _flat(tree: Any) -> list[Any]:
    from torch.utils._pytree import tree_flatten

    return list(tree_flatten(tree)[0])


def _map_tree(tree: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: fn(x) if isinstance(x, torch.Tensor) else x, tree)


def _sptr(t: torch.Tensor) -> int:
    return int(t.untyped_storage().data_ptr())


def _byte_off(t: torch.Tensor) -> int:
    return int(t.data_ptr()) - _sptr(t)


def _extent(t: torch.Tensor) -> int:
    """Bytes from ``t``'s first element to one past its last (strides may be zero)."""
    if t.numel() == 0:
        return 0
    last = sum((n - 1) * s for n, s in zip(t.size(), t.stride(), strict=True))
    return (int(last) + 1) * t.element_size()


__all__ = ["TwinError", "Twins", "install", "mirror", "tensor_args"]
