"""The judge's guard bands (sandbox.problem.tensors.Guards): a write past a tensor is a
breach, except the bytes up to the tensor's next 16-byte boundary, which a TMA store writes
on a GPU (an H100 wrote them for every fp16 vector whose size was not a multiple of 16
bytes: bench/tma_tail.py)."""

from __future__ import annotations

import torch

from sandbox.problem.tensors import GUARD, STORE_UNIT, Guards, Slot, total_bytes


def _slots() -> list[Slot]:
    # 1001 fp16 elements: 2002 bytes, 14 bytes short of a 16-byte boundary
    return [Slot("x", "input", "float16", (1001,), GUARD, 2002),
            Slot("out", "output", "float16", (1001,), GUARD + 2048 + GUARD, 2002)]


def _breach(write: tuple[int, int]) -> tuple[str, int] | None:
    slots = _slots()
    base = torch.zeros(total_bytes(slots), dtype=torch.uint8)
    g = Guards(slots, "cpu", 7)
    g.arm(base)
    at, n = write
    base[at: at + n] = ~base[at: at + n]  # every written byte differs from the pattern
    return g.first_breach(base)


def test_the_store_units_tail_after_a_tensor_is_no_breach() -> None:
    end = _slots()[1].offset + 2002
    assert (-end) % STORE_UNIT == 14
    assert _breach((end, 14)) is None


def test_a_byte_past_the_store_unit_and_any_byte_before_a_tensor_are_breaches() -> None:
    out = _slots()[1]
    end = out.offset + out.nbytes
    assert _breach((end, 15)) == ("after 'out'", 14)
    assert _breach((end + 14, 1)) == ("after 'out'", 14)
    assert _breach((out.offset - 1, 1)) == ("after 'x'", out.offset - 1 - (_slots()[0].offset + 2002))
    assert _breach((GUARD - 1, 1)) == ("before 'x'", GUARD - 1)


def test_a_tensor_ending_on_the_boundary_is_checked_from_its_first_byte_after() -> None:
    slots = [Slot("out", "output", "float16", (1000,), GUARD, 2000)]
    base = torch.zeros(total_bytes(slots), dtype=torch.uint8)
    g = Guards(slots, "cpu", 3)
    g.arm(base)
    base[GUARD + 2000] ^= 0xFF
    assert g.first_breach(base) == ("after 'out'", 0)
