"""Correct but starved of parallelism: 8 programs of one warp each loop over the vector.

Expected profile: achieved occupancy of a few percent, a grid far below one wave, DRAM
throughput far below peak; advice: more blocks (smaller chunks per program).
"""

import torch
import triton
import triton.language as tl

PROGRAMS = 8
BLOCK = 1024


@triton.jit
def scale_loop_kernel(x_ptr, out_ptr, n, chunk, BLOCK: tl.constexpr):
    start = tl.program_id(0) * chunk
    for base in range(start, start + chunk, BLOCK):
        offs = base + tl.arange(0, BLOCK)
        mask = (offs < n) & (offs < start + chunk)
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x * 2.0, mask=mask)


def launch(x: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    chunk = triton.cdiv(triton.cdiv(n, PROGRAMS), BLOCK) * BLOCK
    scale_loop_kernel[(PROGRAMS,)](x, out, n, chunk, BLOCK=BLOCK, num_warps=1)
