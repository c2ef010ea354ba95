# expect: allow
"""str.format with plain fields ({}, {0}, {name}, nested {width}) reads no attribute: fine
under `default`. The kernel-only policies deny .format altogether (use an f-string)."""

import torch
import triton
import triton.language as tl

SHAPE_ERROR = "expected {0} elements, got {1} ({name})"


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def launch(x, out):
    if x.numel() != out.numel():
        raise ValueError(SHAPE_ERROR.format(out.numel(), x.numel(), name="x"))
    label = "{}x{:>{width}}".format(x.shape[0], x.numel(), width=6)
    assert label
    copy_kernel[(triton.cdiv(out.numel(), 1024),)](x, out, out.numel(), BLOCK=1024)
