"""Wrong: the grid is computed from the row length only, so most rows are never written."""

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask),
             mask=mask)


def custom_kernel(data):
    a, b = data
    out = torch.zeros_like(a)  # zeros, not empty: the rows it skips read as wrong values, not
    # as whatever the allocator's memory held (NaN there reads as "left unwritten")
    n = a.shape[1]
    add_kernel[(triton.cdiv(n, BLOCK),)](a, b, out, n, BLOCK=BLOCK)
    return out
