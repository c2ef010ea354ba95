# expect: allow
"""Inside a @triton.jit body, x.to(), x.sum() and friends are Triton ops, not torch compute."""

import torch
import triton
import triton.language as tl


@triton.jit
def row_mean_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    total = x.sum(axis=0)
    peak = x.max(axis=0)
    tl.store(out_ptr + row, (total / n_cols + peak * 0.0).to(out_ptr.dtype.element_ty))


def launch(x, out):
    rows, cols = x.shape
    row_mean_kernel[(rows,)](x, out, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols))
