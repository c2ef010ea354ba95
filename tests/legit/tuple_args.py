# expect: allow
"""Vector add whose inputs travel as one tuple argument (Triton >= 3.2): the kernel indexes
the tuple (xy[0], xy[1]) and the launcher passes (x, y)."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(xy, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(xy[0] + offsets, mask=mask)
    y = tl.load(xy[1] + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    add_kernel[(triton.cdiv(n, 1024),)]((x, y), out, n, BLOCK_SIZE=1024)
