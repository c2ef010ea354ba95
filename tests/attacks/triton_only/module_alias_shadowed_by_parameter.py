# expect: deny attribute-not-allowed
"""Parameters named like module aliases: the scan's alias table has no scopes, so out.numpy()
read as math.numpy, which the math allow-list entry ("*") allowed."""

import math as out
import math as y
import torch
import triton
import triton.language as tl
import triton.language as x


@triton.jit
def idle_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


def launch(x, y, out):
    out.numpy()[...] = x.numpy() + y.numpy()
    idle_kernel[(1,)](torch.empty(16), 16, BLOCK=16)
