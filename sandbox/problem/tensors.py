"""Tensor layout, seeded inputs, poisoning and comparison (judge side).

Everything the verdict depends on happens here, in the judge's process, on memory the
judge allocated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from sandbox.contract.wire import DTYPE_CODES, TensorWire

DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
    "float64": torch.float64, "int8": torch.int8, "int32": torch.int32, "int64": torch.int64,
    "uint8": torch.uint8, "bool": torch.bool,
}
# Dtypes whose every value float32 holds exactly: compare() checks their usual case in
# float32, with FLOAT32_MARGIN off the tolerance (2**-20, against float32's 2**-24 rounding).
EXACT_IN_FLOAT32 = frozenset({torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.bool})
FLOAT32_MARGIN = 1.0 - 2.0 ** -20
ALIGN = 256
# Canary bytes before, between and after the tensors of a shared buffer. A kernel without
# a mask writes up to a block past its output; 64 KiB covers a 16K-element fp32 block.
GUARD = 64 << 10


@dataclass(frozen=True)
class Slot:
    """Where one tensor lives inside a shared buffer."""

    name: str
    role: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    def wire(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": list(self.shape), "offset": self.offset,
                "role": self.role}


def layout(tensors: Sequence[TensorWire], dims: dict[str, int]) -> list[Slot]:
    """Place every tensor of the task, for one dimension binding, at aligned offsets."""
    slots, off = [], GUARD
    for t in tensors:
        shape = tuple(int(d) if isinstance(d, int) else int(dims[d]) for d in t.shape)
        dtype = resolve_dtype(t.dtype, dims)
        itemsize = torch.empty((), dtype=DTYPES[dtype]).element_size()
        nbytes = max(1, math.prod(shape)) * itemsize
        slots.append(Slot(t.name, t.role, dtype, shape, off, nbytes))
        off += _aligned(nbytes) + GUARD
    return slots


def resolve_dtype(dtype: str, dims: dict[str, int]) -> str:
    """A dtype, or a generated task's dtype variable resolved by its binding in ``dims``."""
    if dtype in DTYPES:
        return dtype
    code = dims.get(dtype)
    if code is None or not 0 <= code < len(DTYPE_CODES):
        raise ValueError(f"dtype variable {dtype!r} has no valid binding in {dims}")
    return DTYPE_CODES[code]


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def total_bytes(slots: list[Slot]) -> int:
    last = slots[-1]
    return last.offset + _aligned(last.nbytes) + GUARD


# A TMA store writes whole 16-byte units: an H100 wrote the bytes from a tensor's end to
# the next 16-byte boundary (2-14 bytes, zeros) for every fp16 vector whose size was not a
# multiple of 16 bytes, with host and device descriptors alike (bench/tma_tail.py). Those
# bytes are armed with the pattern every call like the rest of the slack, never checked.
STORE_UNIT = 16


def guard_regions(slots: list[Slot]) -> list[tuple[str, int, int, int]]:
    """``(what, start, end, unchecked)`` of every canary region: before the first tensor,
    between tensors (alignment slack included) and after the last; ``unchecked``: the
    leading bytes up to the tensor's next STORE_UNIT boundary, which a honest TMA store
    writes."""
    regions = [(f"before {slots[0].name!r}", 0, slots[0].offset, 0)]
    for i, s in enumerate(slots):
        end = slots[i + 1].offset if i + 1 < len(slots) else total_bytes(slots)
        start = s.offset + s.nbytes
        regions.append((f"after {s.name!r}", start, end, min((-start) % STORE_UNIT, end - start)))
    return regions


class Guards:
    """A fresh secret byte pattern in every canary region before a call, checked after it."""

    def __init__(self, slots: list[Slot], device: str, seed: int):
        self.regions = guard_regions(slots)
        longest = max(e - b for _, b, e, _ in self.regions)
        g = torch.Generator(device=device)
        g.manual_seed(seed)
        self.pattern = torch.randint(0, 256, (longest,), generator=g, device=device,
                                     dtype=torch.int64).to(torch.uint8)

    def arm(self, base: torch.Tensor) -> None:
        for _, b, e, _ in self.regions:
            base[b:e].copy_(self.pattern[: e - b])

    def first_breach(self, base: torch.Tensor) -> tuple[str, int] | None:
        """The first region a write reached, and the byte offset into it, or None (the
        store unit's tail after a tensor is not a breach: :data:`STORE_UNIT`). Every region
        is compared on the device and read back at once: one synchronization, not one per
        region."""
        diffs = [base[b + skip:e] != self.pattern[skip: e - b] for _, b, e, skip in self.regions]
        hit = torch.stack([d.any() for d in diffs]).tolist()
        for (what, _, _, skip), diff, breached in zip(self.regions, diffs, hit, strict=True):
            if breached:
                return what, skip + int(torch.nonzero(diff)[0])
        return None


def view(base: torch.Tensor, slot: Slot) -> torch.Tensor:
    """A typed, shaped view of ``slot`` inside the flat uint8 ``base``."""
    dtype = DTYPES[slot.dtype]
    # Exactly the tensor's bytes: an empty tensor (a 0 dimension) is a zero-length view of
    # the slot, which still holds one element so that offsets stay distinct.
    raw = base[slot.offset: slot.offset + math.prod(slot.shape) * dtype.itemsize]
    return raw.view(dtype).view(slot.shape)


def make_input(spec: TensorWire, shape: tuple[int, ...], device: str,
               gen: torch.Generator, dtype_name: str | None = None) -> torch.Tensor:
    """``dtype_name``: the slot's resolved dtype (a generated task's dtype variable)."""
    dtype = DTYPES[dtype_name or spec.dtype]
    kind = spec.init_kind
    if kind == "randint" or not (dtype.is_floating_point):
        low, high = int(spec.low), int(spec.high)
        if dtype == torch.bool:
            low, high = 0, 2
        elif kind != "randint":  # an integer tensor with a float init: the classic range
            low, high = 0, 100
        if high <= low:
            high = low + 1
        out = torch.randint(low, high, shape, generator=gen, device=device, dtype=torch.int64)
        return out.to(dtype)
    if kind == "uniform":
        lo, hi = spec.low, spec.high
        out = torch.rand(shape, generator=gen, device=device, dtype=torch.float32) * (hi - lo) + lo
    else:
        out = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
        out = out * spec.std + spec.mean
    return out.to(dtype)


def poison(t: torch.Tensor) -> None:
    """Fill an output with a value no honest kernel leaves behind."""
    if t.dtype.is_floating_point:
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    elif t.dtype == torch.uint8:
        t.fill_(0xA5)
    else:
        t.fill_(-0x5A5A5A5A if t.element_size() >= 4 else -0x5A)


@dataclass
class Comparison:
    ok: bool
    max_abs: float | None
    max_rel: float | None
    mismatch_fraction: float
    first_bad: dict[str, Any] | None


def compare(actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float,
            max_mismatch_fraction: float) -> Comparison:
    """Element-wise ``|a - e| <= atol + rtol * |e|``; NaN only matches NaN.

    Runs on the tensors' device (float64 there), so a GPU check moves only a few scalars to
    the host, never the whole output.
    """
    if tuple(actual.shape) != tuple(expected.shape) or actual.dtype != expected.dtype:
        return Comparison(False, None, None, 1.0, {"index": [], "expected": None, "actual": None,
                                                   "why": "shape or dtype changed"})
    if actual.numel() and actual.dtype in EXACT_IN_FLOAT32:
        fast = _compare_float32(actual, expected, atol, rtol)
        if fast is not None:
            return fast
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    diff = (a - e).abs()
    if diff.numel():
        # The usual case first, read back in one synchronization: every element within
        # tolerance and every difference finite (so every value finite). Its figures are
        # then exactly the full path's; anything else takes the full path below.
        mag = e.abs()
        within = diff <= mag * rtol + atol
        nbad, dmax, rmax = torch.stack([within.logical_not().sum().to(torch.float64), diff.max(),
                                        (diff / mag.clamp_min(1e-12)).max()]).tolist()
        if nbad == 0 and math.isfinite(dmax):
            return Comparison(True, dmax, rmax, 0.0, None)
    return _compare_full(a, e, diff, atol, rtol, max_mismatch_fraction)


def _compare_float32(actual: torch.Tensor, expected: torch.Tensor, atol: float,
                     rtol: float) -> Comparison | None:
    """:func:`compare`'s usual case for dtypes float32 holds exactly
    (:data:`EXACT_IN_FLOAT32`), in float32 and in place: half the bytes of the float64
    path, which a timed call's check pays on every call (an fp16 output of 8M elements on an
    H100: 0.39 ms against 0.69 ms). A pass here is a pass there: every element must be
    within the tolerance less :data:`FLOAT32_MARGIN`, far wider than float32's rounding of
    the difference and of the tolerance (a few units of 2**-24), so an element float64 would
    reject never passes. Anything else (an element near the tolerance, NaN, an infinity)
    returns None, and the float64 path decides. The figures (largest absolute and relative
    errors) are float32's, within a few units of 2**-24 of float64's."""
    d = actual.detach().to(torch.float32)
    m = expected.detach().to(torch.float32)
    d.sub_(m).abs_()
    m.abs_()
    tol = m.mul(rtol).add_(atol).mul_(FLOAT32_MARGIN)
    nbad = (d <= tol).logical_not_().sum().to(torch.float32)
    dmax = d.max()
    rmax = d.div_(m.clamp_min_(1e-12)).max()
    bad, dm, rm = torch.stack([nbad, dmax, rmax]).tolist()
    if bad == 0 and math.isfinite(dm):
        return Comparison(True, dm, rm, 0.0, None)
    return None


def _compare_full(a: torch.Tensor, e: torch.Tensor, diff: torch.Tensor, atol: float, rtol: float,
                  max_mismatch_fraction: float) -> Comparison:
    """:func:`compare` of any values: NaN, infinities, elements off the reference."""
    both_nan = a.isnan() & e.isnan()
    same_inf = a.isinf() & e.isinf() & (a == e)
    bad = ~((diff <= atol + rtol * e.abs()) | both_nan | same_inf)
    n = max(1, bad.numel())
    nbad = int(bad.sum())
    finite = ~(a.isnan() | e.isnan() | a.isinf() | e.isinf())
    any_finite = bool(finite.any())
    zero = torch.zeros((), dtype=torch.float64, device=a.device)
    max_abs = float(torch.where(finite, diff, zero).max()) if any_finite else None
    rel = diff / e.abs().clamp_min(1e-12)
    max_rel = float(torch.where(finite, rel, zero).max()) if any_finite else None
    frac = nbad / n
    first = None
    if nbad:
        flat = int(torch.nonzero(bad.reshape(-1))[0])
        idx = list(_unravel(flat, tuple(a.shape)))
        first = {"index": idx, "expected": _num(e.reshape(-1)[flat]), "actual": _num(a.reshape(-1)[flat])}
    return Comparison(frac <= max_mismatch_fraction, max_abs, max_rel, frac, first)


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for dim in reversed(shape):
        out.append(flat % dim)
        flat //= dim
    return tuple(reversed(out))


def _num(x: torch.Tensor) -> float | None:
    v = float(x)
    return None if math.isnan(v) or math.isinf(v) else v


def dtype_code(dtype: torch.dtype) -> str:
    """The wire's name of ``dtype`` (``"float32"``...), or its torch text when unnamed."""
    for name, d in DTYPES.items():
        if d == dtype:
            return name
    return str(dtype).removeprefix("torch.")


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` hold the same bytes (an input holding NaN equals itself here;
    ``torch.equal`` says it does not)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return bool(torch.equal(a.reshape(-1).contiguous().view(torch.uint8),
                                b.reshape(-1).contiguous().view(torch.uint8)))
    return bool(torch.equal(a, b))
