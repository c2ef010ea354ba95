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

import dataclasses
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

ALIGN = 512  # decoys keep the slot's pointer alignment modulo this (vectorised paths)
_FILL = 0xFF  # NaN for every float dtype, -1 for signed integers
SLOW = object()  # Twins.direct: this argument takes the slow lane


class TwinError(RuntimeError):
    """A kernel argument kgrader cannot give a twin (the candidate's failure)."""


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
        self.copies = 0  # host tensors copied to the kernels' side in the current call

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

    def end(self) -> dict[str, int]:
        """Deactivate and forget this call's copies; what the call did, for the reply."""
        with self._lock:
            self.active = False
            self._direct = {}
            self._map = {k: e for k, e in self._map.items() if e.slot}
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

    def direct(self, a: Any) -> Any:
        """The fast lane of :meth:`kernel_arg`: a decoy itself, or any non-pointer value;
        ``SLOW`` when the argument needs :meth:`kernel_arg` (which may make tensors)."""
        hit = self._direct.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
        if isinstance(a, torch.Tensor) or hasattr(a, "data_ptr") or hasattr(a, "base"):
            return SLOW
        return a

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

    def kernel_arg(self, a: Any) -> Any:
        """One argument of a Triton launch, as the kernel must see it."""
        if isinstance(a, torch.Tensor):
            return self.twin(a)
        base = getattr(a, "base", None)
        if isinstance(base, torch.Tensor) and dataclasses.is_dataclass(a) and not isinstance(a, type):
            return dataclasses.replace(a, base=self.twin(base))  # e.g. a TMA TensorDescriptor
        if hasattr(a, "data_ptr") and not isinstance(a, type):
            raise TwinError(f"a kernel argument of type {type(a).__name__} exposes data_ptr but "
                            "is not a tensor: kernel-only tasks launch kernels on tensors")
        return a

    @contextmanager
    def launching(self) -> Iterator[None]:
        with _disable_current_modes():
            yield


def mirror(twins: Twins, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
    """Re-run non-computing op ``func`` on the twins of its tensor arguments (the op audit
    calls this for allowed ops, after running ``func`` itself on what the host code holds)."""
    if not twins.active:
        return
    flat_in = _tensors(args, kwargs)
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
    """Route every Triton launch's arguments through the active twins (idempotent)."""
    for cls in _kernel_classes():
        run = cls.__dict__.get("run")
        if run is None or getattr(run, "_kgrader_twins", False):
            continue

        def wrapped(self: Any, *args: Any, _run: Any = run, **kwargs: Any) -> Any:
            twins = twins_of()
            if twins is None or not twins.active:
                return _run(self, *args, **kwargs)
            a = [twins.direct(x) for x in args]
            kw = {k: twins.direct(v) for k, v in kwargs.items()}
            if any(x is SLOW for x in a) or any(v is SLOW for v in kw.values()):
                with twins.launching():  # views, scratch tensors, descriptors: made here
                    a = [twins.kernel_arg(x) for x in args]
                    kw = {k: twins.kernel_arg(v) for k, v in kwargs.items()}
            twins.launches += 1
            return _run(self, *a, **kw)

        wrapped._kgrader_twins = True  # type: ignore[attr-defined]
        cls.run = wrapped  # type: ignore[attr-defined]


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


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
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


__all__ = ["TwinError", "Twins", "install", "mirror"]
