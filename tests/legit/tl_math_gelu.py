# expect: allow
"""GELU with tl.math.erf and tl.math helpers; the scale constant comes from `math`."""

import math

import torch
import triton
import triton.language as tl

INV_SQRT2 = 1.0 / math.sqrt(2.0)


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n, INV: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = 0.5 * x * (1.0 + tl.math.erf(x * INV))
    y = tl.where(tl.math.isnan(y), 0.0, y) if False else y
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def launch(x: torch.Tensor, out: torch.Tensor) -> None:
    n = x.numel()
    gelu_kernel[(math.ceil(n / 512),)](x, out, n, INV=INV_SQRT2, BLOCK=512)
