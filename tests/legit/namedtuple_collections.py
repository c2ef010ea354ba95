# expect: allow
"""Vector add whose inputs travel as a collections.namedtuple; the kernel reads the fields
by name (pair.x, pair.y)."""

from collections import namedtuple

import torch
import triton
import triton.language as tl

Pair = namedtuple("Pair", ["x", "y"])


@triton.jit
def add_kernel(pair, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(pair.x + offsets, mask=mask)
    y = tl.load(pair.y + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    add_kernel[(triton.cdiv(n, 1024),)](Pair(x, y), out, n, BLOCK_SIZE=1024)
