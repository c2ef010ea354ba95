"""Which generated tensors are output buffers: found by the reference's behaviour.

GPU MODE's generators often hand the kernel a preallocated output tensor beside its inputs
(``return data, torch.empty(n).contiguous()``), which the submission writes. Those tensors
may be written; every other generated tensor is a read-only input whose change is
``input_mutated``. Syntax cannot tell them apart (``torch.empty(...)`` then ``uniform_`` is
an input, ``torch.empty(...).contiguous()`` a buffer), so the problem process asks the
reference, once per data structure, on one generated input:

* a tensor the reference *writes* (its bytes change across the call) is an output buffer;
* a tensor whose contents the reference's result does not depend on (two perturbations of
  it, the others kept, give the same result, byte for byte) is not read: an output buffer
  (prefixsum's reference returns a new float64 tensor and never reads the handed buffer);
* anything else is an input. When the reference is not deterministic (two calls on the
  same data disagree), "not read" cannot be decided: then the importer's syntactic guess
  (``ProblemWire.scratch``) decides for the tensors the reference did not write.

This runs problem code: only in the problem process (:mod:`sandbox.problem.field`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from sandbox.problem.pytree import returned_tensors

WRITTEN = "output buffer (written by the reference)"
UNREAD = "output buffer (not read by the reference)"
GUESSED = "output buffer (syntactic guess: the reference is not deterministic)"
READ = "input (read by the reference)"
INPUT_GUESSED = "input (syntactic guess: the reference is not deterministic)"
EMPTY = "input (no elements)"


@dataclass(frozen=True)
class Classified:
    """Per generated tensor (in flattening order): how it was classified."""

    how: tuple[str, ...]

    @property
    def writable(self) -> list[int]:
        return [i for i, h in enumerate(self.how) if h.startswith("output buffer")]


def same(a: Any, b: Any) -> bool:
    """Byte-for-byte equal tensors (NaN equals the same NaN; no dtype promotion)."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape) or a.device != b.device:
        return False
    return torch.equal(_bytes(a), _bytes(b))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def perturbations(t: torch.Tensor) -> list[torch.Tensor]:
    """Two other contents for ``t``, each different from it wherever it has elements."""
    if t.dtype == torch.bool:
        return [~t, ~t]
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return [torch.full_like(t, float("nan")), t * 2 + 3]
    return [t + 1, t ^ 0x55]


def classify(tensors: Sequence[torch.Tensor], call: Callable[[list[torch.Tensor]], Any],
             guessed: set[int]) -> Classified:
    """Classify ``tensors`` by ``call`` (the reference on the data rebuilt from a list of
    tensors). ``guessed``: the syntactic guess's tensor indices, the fallback.

    ``call`` raising on the unperturbed data is left to the caller (it is the problem's
    failure); raising on perturbed data means the tensor is read."""
    before = [t.clone() for t in tensors]
    work = [t.clone() for t in tensors]
    first = _outputs(call(work))
    written = {i for i, (w, b) in enumerate(zip(work, before, strict=True)) if not same(w, b)}
    second = _outputs(call([t.clone() for t in before]))
    deterministic = len(first) == len(second) and all(
        same(a, b) for a, b in zip(first, second, strict=True))
    how = []
    for i, t in enumerate(before):
        if i in written:
            how.append(WRITTEN)
        elif t.numel() == 0:
            how.append(EMPTY)
        elif not deterministic:
            how.append(GUESSED if i in guessed else INPUT_GUESSED)
        else:
            how.append(_probe(before, i, call, first))
    return Classified(tuple(how))


def _probe(before: list[torch.Tensor], i: int, call: Callable[[list[torch.Tensor]], Any],
           baseline: list[torch.Tensor]) -> str:
    """Tensor ``i`` under other contents: written (uninitialised memory can hold, by
    chance, exactly what the reference writes), read, or neither."""
    read = False
    for alt in perturbations(before[i]):
        data = [alt.clone() if j == i else t.clone() for j, t in enumerate(before)]
        try:
            got = _outputs(call(data))
        except Exception:  # the reference failed on other contents: it read them
            read = True
            continue
        if not same(data[i], alt):
            return WRITTEN
        read = read or len(got) != len(baseline) or not all(
            same(a, b) for a, b in zip(got, baseline, strict=True))
    return READ if read else UNREAD


def _outputs(out: Any) -> list[torch.Tensor]:
    return [t.detach().clone() for t in returned_tensors(out)]


def describe(names: Sequence[str], c: Classified) -> str:
    """One line for the record: each generated tensor's classification."""
    return "; ".join(f"{n}: {h}" for n, h in zip(names, c.how, strict=True))
