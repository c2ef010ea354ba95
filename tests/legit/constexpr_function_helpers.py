# expect: allow
"""Vector add whose block size and warp count come from @triton.constexpr_function helpers,
plain Python run at compile time on constexpr values (from the kernel and from the host)."""

import torch
import triton
import triton.language as tl


@triton.constexpr_function
def half_block(block):
    return block // 2


@triton.constexpr_function
def warps_for(block):
    return 4 if block >= 1024 else 2


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    HALF: tl.constexpr = half_block(BLOCK_SIZE)
    pid = tl.program_id(axis=0)
    for part in tl.static_range(2):
        offsets = pid * BLOCK_SIZE + part * HALF + tl.arange(0, HALF)
        mask = offsets < n_elements
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x + y, mask=mask)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    block = 1024
    add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK_SIZE=block,
                                        num_warps=warps_for(block))
