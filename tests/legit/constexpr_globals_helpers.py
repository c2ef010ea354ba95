# expect: allow
"""RMSNorm with module-level tl.constexpr globals and @triton.jit helpers called from the kernel.

Triton reads a global inside a kernel only when its value is a tl.constexpr instance, so
the constants are both annotated and constructed as one.
"""

import torch
import triton
import triton.language as tl

BLOCK: tl.constexpr = tl.constexpr(1024)
EPS: tl.constexpr = tl.constexpr(1e-6)


@triton.jit
def _load_row(ptr, row, stride, n_cols):
    cols = tl.arange(0, BLOCK)
    return tl.load(ptr + row * stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)


@triton.jit
def _rms(x, n_cols):
    return tl.math.rsqrt(tl.sum(x * x, axis=0) / n_cols + EPS)


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, stride, n_cols):
    row = tl.program_id(0)
    x = _load_row(x_ptr, row, stride, n_cols)
    w = _load_row(w_ptr, 0, 0, n_cols)
    cols = tl.arange(0, BLOCK)
    y = x * _rms(x, n_cols) * w
    tl.store(out_ptr + row * stride + cols, y.to(out_ptr.dtype.element_ty), mask=cols < n_cols)


def launch(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> None:
    rows, cols = x.shape
    if cols > BLOCK:
        raise ValueError(f"rows of {cols} do not fit one block of {BLOCK}")
    rmsnorm_kernel[(rows,)](x, weight, out, x.stride(0), cols)
