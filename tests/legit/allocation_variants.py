# expect: allow
"""Allocation helpers (empty_like, zeros, full) and dtype tables are allowed."""

import torch
import triton
import triton.language as tl

TL_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    alpha = tl.load(alpha_ptr)
    tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


def launch(x, y, out):
    alpha = torch.full((1,), 2.0, dtype=x.dtype, device=x.device)
    tmp = torch.empty_like(out)
    zeros = torch.zeros(1, device=x.device)
    del zeros
    n = out.numel()
    axpy_kernel[(triton.cdiv(n, 1024),)](x, y, tmp, alpha, n, BLOCK=1024)
    axpy_kernel[(triton.cdiv(n, 1024),)](tmp, y, out, alpha, n, BLOCK=1024)
