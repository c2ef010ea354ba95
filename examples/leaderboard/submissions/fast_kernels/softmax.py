"""Correct row softmax: one program per row, BLOCK = next power of two >= N, masked."""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=-float("inf"))
    z = x - tl.max(x, axis=0)
    e = tl.exp(z)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * row_stride + cols, y, mask=mask)


def launch(x: torch.Tensor, out: torch.Tensor) -> None:
    m, n = x.shape
    softmax_kernel[(m,)](x, out, n, x.stride(0), BLOCK=triton.next_power_of_2(n))
