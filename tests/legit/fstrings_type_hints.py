# expect: allow
"""f-strings in error messages and full type hints (Optional, tuple, Callable)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch
import triton
import triton.language as tl

Grid = Callable[[dict[str, int]], tuple[int, ...]]


@triton.jit
def relu_kernel(x_ptr, out_ptr, n: int, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def make_grid(n: int) -> Grid:
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


def launch(x: torch.Tensor, out: torch.Tensor, block: Optional[int] = None) -> None:
    if x.shape != out.shape:
        raise ValueError(f"expected {tuple(x.shape)!r}, got {tuple(out.shape)!r} (eval({x.dtype}))")
    relu_kernel[make_grid(x.numel())](x, out, x.numel(), BLOCK=block or 1024)
