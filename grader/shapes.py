"""Generated shape sets: a task's dimensions drawn per evaluation from a secret seed (host).

A task may declare ``shapes.generate`` instead of (or beside) fixed shapes: named
dimensions with ranges, divisibility (``multiple_of``, every drawn value) and alignment
(``align``: tune shapes are aligned like production sizes; hidden shapes probe around
its multiples), dtype variables with their choices, and how many tune (A) and hidden
(B) shapes to draw. :func:`draw` is deterministic in its seed; the seed is fresh from
``secrets`` per evaluation unless a leaderboard secret supplies one, so a kernel that
hard-codes the shapes it saw last time meets new ones.

The hidden set always holds the edge cases, rotated over the dimensions so that every
dimension meets every case: size 1, a prime, sizes just below and above a power of two
and a block multiple, zero where a dimension allows it, and one shape larger than every
tune shape in each dimension (a kernel without masks or with a grid computed from a
remembered size writes or reads past its tensors there).
"""

from __future__ import annotations

import math
import random
import secrets
from dataclasses import dataclass, field

from grader.report.model import ShapeSets
from grader.shapespec import DimRange, GenerateSpec
from grader.task import TaskSpec
from sandbox.contract.wire import DTYPE_CODES

CASES = ("one", "prime", "pow2_below", "pow2_above", "block_below", "block_above")


@dataclass(frozen=True)
class DrawnShapes:
    """One draw: tune and hidden bindings, and what each hidden shape probes."""

    tune: list[dict[str, int]]
    hidden: list[dict[str, int]]
    probes: list[str] = field(default_factory=list)


def draw(gen: GenerateSpec, seed: int, seen: list[dict[str, int]] | None = None) -> DrawnShapes:
    """The shape sets for ``seed`` (the same seed always gives the same sets). ``seen``:
    fixed shapes candidates also know (fixed tune shapes, the timed one), which the larger
    hidden shape must exceed too."""
    rng = random.Random(seed)
    names = list(gen.dims)
    tune: list[dict[str, int]] = []
    for _ in range(gen.tune * 20):
        if len(tune) == gen.tune:
            break
        shape = {n: _aligned_value(gen.dims[n], rng) for n in names}
        if shape not in tune:
            tune.append(shape)
    known = tune + [s for s in seen or [] if set(gen.dims) <= set(s)]
    hidden, probes = [_larger(gen, known, rng)], ["larger than every tune shape"]
    cases = list(CASES) + (["zero"] if any(d.allow_zero for d in gen.dims.values()) else [])
    for i in range(len(cases)):
        shape, labels = {}, []
        for j, n in enumerate(names):
            case = cases[(i + j) % len(cases)]
            v = _edge(gen.dims[n], case, rng)
            shape[n] = v if v is not None else _value(gen.dims[n], rng, aligned=False)
            labels.append(f"{n}={case if v is not None else 'random'}")
        hidden.append(shape)
        probes.append(" ".join(labels))
    for _ in range(gen.hidden * 20):
        if len(hidden) >= gen.hidden:
            break
        hidden.append({n: _value(gen.dims[n], rng, aligned=False) for n in names})
        probes.append("random")
    kept, kept_probes = [], []
    for shape, probe in zip(hidden, probes, strict=True):
        if shape not in kept and shape not in tune:
            kept.append(shape)
            kept_probes.append(probe)
    _dtypes(gen, tune, rng)
    _dtypes(gen, kept, rng)
    return DrawnShapes(tune=tune, hidden=kept, probes=kept_probes)


def _dtypes(gen: GenerateSpec, shapes: list[dict[str, int]], rng: random.Random) -> None:
    """Cycle each dtype variable through its choices (from a random start)."""
    for var, choices in gen.dtypes.items():
        off = rng.randrange(len(choices))
        for i, shape in enumerate(shapes):
            shape[var] = DTYPE_CODES.index(choices[(i + off) % len(choices)])


def _value(d: DimRange, rng: random.Random, aligned: bool, lo: int | None = None,
           hi: int | None = None) -> int:
    """A log-uniform value in ``[lo, hi]`` on the dimension's grid (aligned or not)."""
    step = d.step(aligned)
    lo = max(lo if lo is not None else d.lo, d.lo)
    hi = min(hi if hi is not None else d.hi, d.hi)
    first, last = -(-lo // step) * step, hi // step * step
    if first > last:  # no aligned value in range: the divisibility grid still has one
        step = d.multiple_of
        first, last = -(-lo // step) * step, hi // step * step
    if first >= last:
        return first
    x = math.exp(rng.uniform(math.log(first), math.log(last)))
    return min(last, max(first, round(x / step) * step))


def _aligned_value(d: DimRange, rng: random.Random) -> int:
    """A tune value: aligned, and below the largest valid value so a larger one exists."""
    top = d.hi - d.multiple_of if d.hi > d.lo else d.hi
    return _value(d, rng, aligned=True, hi=top)


def _larger(gen: GenerateSpec, tune: list[dict[str, int]], rng: random.Random) -> dict[str, int]:
    """Larger than every tune shape in each dimension, preferably off the alignment."""
    shape = {}
    for n, d in gen.dims.items():
        top = max(t[n] for t in tune)
        lo, hi = top + d.multiple_of, min(d.hi, 2 * top + d.align)
        if lo > d.hi:
            shape[n] = top  # a dimension with one valid value cannot grow
            continue
        hi = max(hi, lo)
        pick = _value(d, rng, aligned=False, lo=lo, hi=hi)
        if d.align > 1 and pick % d.align == 0 and d.valid(pick + d.multiple_of) \
                and (pick + d.multiple_of) % d.align:
            pick += d.multiple_of
        shape[n] = pick
    return shape


def _edge(d: DimRange, case: str, rng: random.Random) -> int | None:
    """The dimension's value for an edge case, or None where the range has none."""
    m = d.multiple_of
    if case == "zero":
        return 0 if d.allow_zero else None
    if case == "one":
        return d.lo
    if case == "prime":
        lo, hi = -(-d.lo // m), d.hi // m
        start = max(lo, 2, round(math.exp(rng.uniform(math.log(max(lo, 2)), math.log(max(hi, 2))))))
        start = min(start, hi)
        p = next((q for q in range(start, hi + 1) if _is_prime(q)), None)
        p = p or next((q for q in range(start, lo - 1, -1) if q >= 2 and _is_prime(q)), None)
        return p * m if p is not None else None
    block = 2 if case.startswith("pow2") else (d.align if d.align > m else 16 * m)
    below = case.endswith("below")
    bases = ([1 << k for k in range(2, 62)] if case.startswith("pow2")
             else [j * block for j in range(1, d.hi // block + 2)])
    options = [b - m if below else b + m for b in bases]
    options = [v for v in options if d.lo <= v <= d.hi and v % m == 0]
    if not options:
        return None
    # A log-uniform pick among the candidates: small and large blocks alike.
    return options[min(len(options), int(math.exp(rng.uniform(0, math.log(len(options) + 1))))) - 1]


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    return all(n % f for f in range(2, math.isqrt(n) + 1))


def bound_shape(gen: GenerateSpec) -> dict[str, int]:
    """The largest shape any draw can give: every dimension at its maximum (``task check``
    proves this one fits the memory limit, hence every draw does)."""
    shape = {n: d.hi for n, d in gen.dims.items()}
    for var, choices in gen.dtypes.items():
        widest = max(choices, key=lambda c: _DTYPE_BYTES[c])
        shape[var] = DTYPE_CODES.index(widest)
    return shape


_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "int32": 4,
                "int64": 8, "uint8": 1, "bool": 1}


def resolve_shapes(task: TaskSpec, seed: int | None = None) -> tuple[TaskSpec, DrawnShapes | None]:
    """The task with its generated shapes drawn (unchanged when it declares none).

    ``seed``: a leaderboard's secret seed; None draws a fresh secret one."""
    gen = task.shapes.generate
    if gen is None:
        return task, None
    seen = [*task.shapes.tune, *([task.shapes.timed] if task.shapes.timed else [])]
    drawn = draw(gen, seed if seed is not None else secrets.randbits(62), seen)
    shapes = task.shapes.model_copy(update={"tune": [*task.shapes.tune, *drawn.tune],
                                            "hidden": [*task.shapes.hidden, *drawn.hidden]})
    return task.model_copy(update={"shapes": shapes}), drawn


def draw_shapes(task: TaskSpec, seed: int | None = None) -> tuple[TaskSpec, ShapeSets | None]:
    """:func:`resolve_shapes`, and the drawn sets as the report records them."""
    resolved, drawn = resolve_shapes(task, seed)
    if drawn is None or task.shapes.generate is None:
        return resolved, None
    dvars = set(task.shapes.generate.dtypes)
    return resolved, ShapeSets(
        seed="secret" if seed is None else "leaderboard",
        tune=[named(b, dvars) for b in drawn.tune], hidden=[named(b, dvars) for b in drawn.hidden],
        hidden_probes=list(drawn.probes), timed=named(resolved.timed_dims(), dvars))


def named(binding: dict[str, int], dtype_vars: set[str] | None = None) -> dict[str, int | str]:
    """A binding for people: dtype variables by name rather than by code."""
    return {k: (DTYPE_CODES[v] if dtype_vars and k in dtype_vars and 0 <= v < len(DTYPE_CODES)
                else v) for k, v in binding.items()}
