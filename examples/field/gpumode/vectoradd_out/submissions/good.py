"""Correct: a masked elementwise Triton kernel writing the output buffer it is handed."""

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
    a, b, c = data
    n = a.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](a, b, c, n, BLOCK=BLOCK)
    return c
