"""Dropped tail: BLOCK is the largest power of two <= N, "so no mask is needed".

Correct when N is a power of two (the tune shape, N = 256). Otherwise only the first
BLOCK columns of each row are normalised (over the wrong sum) and the rest are never
written; every access stays in bounds, so the failure is a clean wrong answer.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * row_stride + cols)
    z = x - tl.max(x, axis=0)
    e = tl.exp(z)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * row_stride + cols, y)


def launch(x: torch.Tensor, out: torch.Tensor) -> None:
    m, n = x.shape
    block = 1 << (n.bit_length() - 1)
    softmax_kernel[(m,)](x, out, x.stride(0), BLOCK=block)
