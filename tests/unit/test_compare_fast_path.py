"""The output comparison's fast path (sandbox.problem.tensors.compare): one device read-back
for outputs that are all close and finite, and exactly the full path's verdict and figures
for every input, fast or not."""

from __future__ import annotations

import math

import pytest
import torch

from sandbox.problem import tensors
from sandbox.problem.tensors import Guards, Slot, compare


def _full(actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float,
          frac: float) -> tensors.Comparison:
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    return tensors._compare_full(a, e, (a - e).abs(), atol, rtol, frac)


def _same(x: tensors.Comparison, y: tensors.Comparison, rel: float = 0.0) -> None:
    """The same verdict, mismatch and first bad element; the same figures, or within
    ``rel`` of them (float32's figures for the dtypes it holds exactly)."""
    assert x.ok == y.ok and x.mismatch_fraction == y.mismatch_fraction
    assert x.first_bad == y.first_bad
    for p, q in ((x.max_abs, y.max_abs), (x.max_rel, y.max_rel)):
        assert (p is None and q is None) or (p == q or (math.isnan(p) and math.isnan(q))
                                             or math.isclose(p, q, rel_tol=rel, abs_tol=0.0))


SPECIALS = (0.0, -0.0, float("nan"), float("inf"), float("-inf"), 65504.0, 1e-7)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int32])
def test_every_kind_of_output_gets_the_full_paths_verdict_and_figures(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(7)
    for trial in range(60):
        e = (torch.randn(257, generator=g) * 10).to(dtype)
        a = e.clone()
        kind = trial % 6
        if kind == 1:  # small errors, within or just past the tolerance
            a = (e.to(torch.float64) + torch.randn(257, generator=g, dtype=torch.float64) * 1e-3).to(dtype)
        elif kind == 2 and dtype.is_floating_point:  # special values on either side
            i = torch.randint(0, 257, (4,), generator=g)
            for j, k in zip(i.tolist(), torch.randint(0, len(SPECIALS), (4,), generator=g).tolist(), strict=True):
                (a if j % 2 else e)[j] = SPECIALS[k]
        elif kind == 3 and dtype.is_floating_point:  # the same special value on both sides
            e[3] = a[3] = float("inf")
            e[5] = a[5] = float("nan")
        elif kind == 4:  # one element far off
            a[100] = a[100] + 50
        elif kind == 5:  # every element off
            a = a + 3
        rel = 2.0 ** -21 if dtype in tensors.EXACT_IN_FLOAT32 else 0.0
        for frac in (0.0, 0.01, 1.0):
            _same(compare(a, e, 1e-3, 1e-3, frac), _full(a, e, 1e-3, 1e-3, frac), rel)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_an_element_at_the_tolerance_gets_the_float64_verdict(dtype: torch.dtype) -> None:
    # float32's rounding of the difference and of the tolerance could flip an element that
    # sits on the tolerance: the float32 path leaves every element within its margin of it
    # to the float64 path, whose verdict stands.
    e = torch.tensor([1.0, 2.0], dtype=dtype)
    a = torch.tensor([1.0, 2.0 + 2.0 ** -6], dtype=dtype)  # one unit of bf16 at 2: 2**-6
    for atol in (2.0 ** -6, 2.0 ** -6 * (1 - 1e-9), 2.0 ** -6 * (1 + 1e-9), 2.0 ** -6 * (1 - 2.0 ** -30)):
        got, full = compare(a, e, atol, 0.0, 0.0), _full(a, e, atol, 0.0, 0.0)
        assert got.ok == full.ok
        _same(got, full)


def test_empty_and_mismatched_outputs() -> None:
    empty = torch.zeros(0, 4)
    _same(compare(empty, empty, 0.0, 0.0, 0.0), _full(empty, empty, 0.0, 0.0, 0.0))
    bad = compare(torch.zeros(3), torch.zeros(4), 0.0, 0.0, 0.0)
    assert not bad.ok and bad.first_bad is not None and bad.first_bad["why"] == "shape or dtype changed"


def test_an_infinite_reference_met_by_a_finite_value_is_left_to_the_full_path() -> None:
    # |inf - 1| <= atol + rtol * inf holds, but the difference is not finite: the figures
    # must leave it out, as the full path does.
    e = torch.tensor([1.0, float("inf")])
    a = torch.tensor([1.0, 1.0])
    got = compare(a, e, 1e-3, 1e-3, 0.0)
    _same(got, _full(a, e, 1e-3, 1e-3, 0.0))
    assert got.ok and got.max_abs == 0.0


def test_guards_name_the_first_breached_region_with_one_read_back() -> None:
    slots = [Slot("x", "input", "float32", (5,), 64, 20), Slot("out", "output", "float32", (5,), 256, 20)]
    base = torch.zeros(tensors.total_bytes(slots), dtype=torch.uint8)
    guards = Guards(slots, "cpu", 3)
    guards.arm(base)
    assert guards.first_breach(base) is None
    end = slots[1].offset + slots[1].nbytes
    base[end + 16] ^= 0xFF  # past the store unit's tail after "out"
    base[2] ^= 0xFF  # and before "x": the first region wins
    assert guards.first_breach(base) == ("before 'x'", 2)
    guards.arm(base)
    base[end + 16] ^= 0xFF
    assert guards.first_breach(base) == ("after 'out'", 16)
