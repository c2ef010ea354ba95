# expect: allow
"""Loads are masked, the store is not: every value the checker reads is right, and each
call writes up to a block of garbage past the end of ``out`` on sizes that are not a
multiple of BLOCK. Only a look past the output (guard bands) sees it."""
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x_ptr + offs, mask=m, other=7.0) + tl.load(y_ptr + offs, mask=m, other=7.0)
    tl.store(o_ptr + offs, v)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
