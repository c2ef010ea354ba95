# expect: allow
"""A small class wraps the kernel; properties, classmethods and __repr__ are fine."""

import torch
import triton
import triton.language as tl


@triton.jit
def clamp_kernel(x_ptr, out_ptr, lo, hi, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.minimum(tl.maximum(x, lo), hi), mask=mask)


class Clamp:
    def __init__(self, lo: float, hi: float, block: int = 1024) -> None:
        self.lo, self.hi, self.block = lo, hi, block

    @classmethod
    def unit(cls) -> "Clamp":
        return cls(0.0, 1.0)

    @property
    def bounds(self) -> tuple[float, float]:
        return (self.lo, self.hi)

    def __repr__(self) -> str:
        return f"Clamp({self.lo}, {self.hi})"

    def __call__(self, x, out):
        n = x.numel()
        clamp_kernel[(triton.cdiv(n, self.block),)](x, out, self.lo, self.hi, n, BLOCK=self.block)


_OP = Clamp.unit()


def launch(x, out):
    _OP(x, out)
