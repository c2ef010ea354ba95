# expect: allow
"""Debug printing, warnings, and harmless sys facts (version_info, maxsize) are fine."""

import sys
import warnings

import torch
import triton
import triton.language as tl

DEBUG = False
PY311 = sys.version_info >= (3, 11)


@triton.jit
def half_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 0.5, mask=mask)


def launch(x, out):
    n = x.numel()
    if n > sys.maxsize // 2:
        warnings.warn("very large input", stacklevel=2)
    if DEBUG:
        print(f"launch n={n} py311={PY311}")
    half_kernel[(triton.cdiv(n, 2048),)](x, out, n, BLOCK=2048, num_warps=8)
