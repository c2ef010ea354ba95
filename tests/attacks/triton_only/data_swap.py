# expect: deny attribute-not-allowed
"""Swaps the output's storage for another tensor's through .data."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def launch(x, y, out):
    scratch = torch.empty_like(out)
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, scratch, x.numel(), BLOCK=1024)
    out.data = scratch.data
