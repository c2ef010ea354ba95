"""Correct, with a huge block on a single warp: 16384 values over 32 threads.

Each thread holds 512 floats: far more than the register file gives it, so the compiler
spills to local memory, and one warp per block leaves the SMs nearly empty. Expected
profile: spill bytes > 0, low occupancy; advice: registers first.
"""

import torch
import triton
import triton.language as tl

BLOCK = 16384


@triton.jit
def scale_big_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    # A reversal forces the whole block to be live at once (no streaming through registers).
    y = tl.flip(x, 0)
    z = tl.flip(y * 2.0, 0)
    tl.store(out_ptr + offs, z, mask=mask)


def launch(x: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    scale_big_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK, num_warps=1)
