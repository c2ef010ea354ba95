# expect: allow
"""Vector add whose inputs travel as a typing.NamedTuple defined in the file; the kernel
reads the fields by name (args.x, args.y)."""

from typing import NamedTuple

import torch
import triton
import triton.language as tl


class AddInputs(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor


@triton.jit
def add_kernel(args, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(args.x + offsets, mask=mask)
    y = tl.load(args.y + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    add_kernel[(triton.cdiv(n, 1024),)](AddInputs(x, y), out, n, BLOCK_SIZE=1024)
