"""Wrong: sums whole blocks only and drops the tail that does not fill one."""

import torch
import triton
import triton.language as tl

BLOCK = 4096


@triton.jit
def sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n - BLOCK + 1, BLOCK):
        acc += tl.load(x_ptr + start + tl.arange(0, BLOCK))
    tl.store(out_ptr, tl.sum(acc, axis=0))


def custom_kernel(data):
    out = torch.empty((), dtype=torch.float32, device=data.device)
    sum_kernel[(1,)](data, out, data.numel(), BLOCK=BLOCK)
    return out
