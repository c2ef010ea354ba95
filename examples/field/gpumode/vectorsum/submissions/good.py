"""Correct: one program walks the vector in masked blocks and accumulates in float32."""

import torch
import triton
import triton.language as tl

BLOCK = 4096


@triton.jit
def sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0))


def custom_kernel(data):
    out = torch.empty((), dtype=torch.float32, device=data.device)
    sum_kernel[(1,)](data, out, data.numel(), BLOCK=BLOCK)
    return out
