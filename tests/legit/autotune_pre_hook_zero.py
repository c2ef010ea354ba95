# expect: allow
"""Atomic-add accumulation autotuned over several configs, each Config zeroing the output
in a pre_hook (nargs["out_ptr"].zero_()) before every launch, trial runs included."""

import torch
import triton
import triton.language as tl


def zero_output(nargs):
    nargs["out_ptr"].zero_()


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 256}, num_warps=2, pre_hook=zero_output),
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4, pre_hook=zero_output),
        triton.Config({"BLOCK_SIZE": 512}, num_warps=4,
                      pre_hook=lambda nargs: nargs["out_ptr"].zero_()),
    ],
    key=["n_elements"],
)
@triton.jit
def accumulate_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    split = tl.program_id(axis=1)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    src = tl.where(split == 0, x_ptr, y_ptr)
    tl.atomic_add(out_ptr + offsets, tl.load(src + offsets, mask=mask), mask=mask)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]), 2)
    accumulate_kernel[grid](x, y, out, n)
