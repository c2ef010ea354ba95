# expect: deny attribute-not-allowed
"""Parameters named like builtins (input) are locals: their attributes are a value's, and
.numpy() on them is as denied as on any other tensor."""

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


def launch(input, other, out):
    out.numpy()[...] = input.numpy() + other.numpy()
    add_kernel[(triton.cdiv(out.numel(), 1024),)](input, other, out, out.numel(), BLOCK=1024)
