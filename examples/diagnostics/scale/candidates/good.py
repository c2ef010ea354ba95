"""Memory-bound scale done well: wide blocks, every SM busy, tail masked.

Expected profile on an H200: DRAM throughput near its peak, the roofline near 1, so the
advice says the kernel is already near its bound.
"""

import torch
import triton
import triton.language as tl

BLOCK = 4096


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * 2.0, mask=mask)


def launch(x: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    scale_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK, num_warps=8)
