"""Dropped tail: no mask, and the grid is rounded *down* so no access is out of bounds.

Correct whenever numel is a multiple of BLOCK (the tune shapes); on other shapes the
last ``numel % BLOCK`` elements are never written, so they keep whatever the judge put
there (its poison) and correctness fails at the first tail index.
"""

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    tl.store(out_ptr + offs, x + y)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    grid = (n // BLOCK,)
    add_kernel[grid](x, y, out, BLOCK=BLOCK)
