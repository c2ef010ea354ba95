# expect: allow
"""The kernel is made with triton.jit(fn) instead of the decorator."""

import torch
import triton
import triton.language as tl


def _fill_impl(out_ptr, value, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, value, mask=offs < n)


fill_kernel = triton.jit(_fill_impl)


def launch(out, value=1.0):
    fill_kernel[(triton.cdiv(out.numel(), 128),)](out, value, out.numel(), BLOCK=128)
