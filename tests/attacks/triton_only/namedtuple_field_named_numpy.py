# expect: deny attribute-not-allowed
"""A namedtuple's fields count as the file's own names, except the ones tensors have:
a field called numpy must not let x.numpy() through."""

from collections import namedtuple

import torch
import triton
import triton.language as tl

Pair = namedtuple("Pair", "numpy x")


@triton.jit
def add_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def launch(x, y, out):
    out.numpy()[...] = x.numpy() + y.numpy()
    add_kernel[(1,)](x, out, 0, BLOCK=16)
