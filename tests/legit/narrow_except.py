# expect: allow
"""A narrow except around configuration lookup; the launch itself is not wrapped."""

import torch
import triton
import triton.language as tl

BLOCKS = {1: 128, 2: 256}


@triton.jit
def sub_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) - tl.load(y_ptr + offs, mask=mask),
             mask=mask)


def launch(x, y, out):
    try:
        block = BLOCKS[x.element_size()]
    except KeyError:
        block = 1024
    try:
        sub_kernel[(triton.cdiv(out.numel(), block),)](x, y, out, out.numel(), BLOCK=block)
    except (ValueError, TypeError) as e:
        raise RuntimeError(f"bad launch: {e}") from e
