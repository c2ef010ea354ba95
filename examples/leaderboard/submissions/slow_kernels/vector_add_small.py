"""Correct but slow: one-warp programs over 32-element blocks, each touched twice.

Tiny blocks mean many short programs, narrow memory transactions and little memory-level
parallelism; the redundant second pass (a masked re-read and re-store of the same block)
doubles the traffic. Results are identical to ``good.py``.
"""

import torch
import triton
import triton.language as tl

BLOCK = 32


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr, PASSES: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    for _ in tl.static_range(PASSES):
        x = tl.load(x_ptr + offs, mask=mask, volatile=True)
        y = tl.load(y_ptr + offs, mask=mask, volatile=True)
        tl.store(out_ptr + offs, x + y, mask=mask)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    grid = (triton.cdiv(n, BLOCK),)
    add_kernel[grid](x, y, out, n, BLOCK=BLOCK, PASSES=2, num_warps=1)
