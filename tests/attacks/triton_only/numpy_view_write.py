# expect: deny attribute-not-allowed
"""Computes on zero-copy numpy views of the tensors (numpy never dispatches, so the op audit
sees nothing) and launches a kernel that stores nothing, only to look like the work."""

import torch
import triton
import triton.language as tl


@triton.jit
def idle_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


def launch(x, y, out):
    out.numpy()[...] = x.numpy() + y.numpy()
    idle_kernel[(triton.cdiv(x.numel(), 1024),)](x, x.numel(), BLOCK=1024)
