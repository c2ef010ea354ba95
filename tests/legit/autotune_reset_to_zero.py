# expect: allow
"""Split reduction with atomic adds, autotuned over several configs: each of two programs
per block adds one input into the output, so the output starts at zero (reset_to_zero
keeps the autotuner's trial runs from piling up; restore_value puts back the accumulator
it reads). out = 0 + x + y, in either order, is x + y exactly."""

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 256}, num_warps=2),
        triton.Config({"BLOCK_SIZE": 512}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),
    ],
    key=["n_elements"],
    reset_to_zero=["out_ptr"],
    restore_value=["acc_ptr"],
)
@triton.jit
def split_add_kernel(x_ptr, y_ptr, out_ptr, acc_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    split = tl.program_id(axis=1)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    src = tl.where(split == 0, x_ptr, y_ptr)
    part = tl.load(src + offsets, mask=mask)
    tl.atomic_add(out_ptr + offsets, part, mask=mask)
    tl.atomic_add(acc_ptr + pid, 1, mask=split == 0)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    out.zero_()
    calls = torch.zeros(triton.cdiv(n, 256), device=out.device, dtype=torch.int32)
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]), 2)
    split_add_kernel[grid](x, y, out, calls, n)
