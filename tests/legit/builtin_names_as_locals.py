# expect: allow
"""Parameters and locals named like builtins (input, format, id, type) are the function's own."""

import torch
import triton
import triton.language as tl


@triton.jit
def axpby_kernel(input_ptr, other_ptr, out_ptr, n, alpha, beta, BLOCK: tl.constexpr):
    id = tl.program_id(0)
    offs = id * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(input_ptr + offs, mask=mask)
    y = tl.load(other_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + beta * y, mask=mask)


def _block_for(numel: int, format: str = "flat") -> int:
    if format == "flat":
        return 1024 if numel >= 1 << 16 else 256
    return 128


def launch(input: torch.Tensor, other: torch.Tensor, out: torch.Tensor) -> None:
    type = input.dtype
    if other.dtype != type:
        raise TypeError(f"dtypes differ: {type} and {other.dtype}")
    n = input.numel()
    block = _block_for(n)
    axpby_kernel[(triton.cdiv(n, block),)](input, other, out, n, 2.0, -1.0, BLOCK=block)
