# expect: allow
"""Kernel that calls @triton.jit helper functions, plus a plain Python helper for the grid."""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu(x):
    return x * tl.sigmoid(x)


@triton.jit
def _load_masked(ptr, offs, n):
    return tl.load(ptr + offs, mask=offs < n, other=0.0)


@triton.jit
def swiglu_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    a = _load_masked(a_ptr, offs, n).to(tl.float32)
    b = _load_masked(b_ptr, offs, n).to(tl.float32)
    tl.store(out_ptr + offs, (_silu(a) * b).to(tl.float16), mask=offs < n)


def _grid(n: int, block: int) -> tuple[int]:
    return (triton.cdiv(n, block),)


def launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    swiglu_kernel[_grid(a.numel(), 1024)](a, b, out, a.numel(), BLOCK=1024)
