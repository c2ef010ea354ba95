# expect: allow
"""functools.lru_cache on a pure helper that picks the block size."""

import functools

import torch
import triton
import triton.language as tl


@functools.lru_cache(maxsize=64)
def pick_block(n: int) -> int:
    return min(4096, triton.next_power_of_2(max(n, 16)))


@triton.jit
def sqr_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * x, mask=mask)


def launch(x, out):
    n = x.numel()
    block = pick_block(n)
    sqr_kernel[(triton.cdiv(n, block),)](x, out, n, BLOCK=block)
