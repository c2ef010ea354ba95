# expect: allow
"""String literals that mention dunder names are data under `default`.

The kernel-only policies deny dunder names in strings (dunder-string): nothing in a kernel
file needs '__import__' as text. `default` judges code, not prose in strings.
"""

import torch
import triton
import triton.language as tl

SNIPPETS = ["__import__('os')", "getattr(x, '__globals__')", "().__class__.__bases__"]
HELP = "the harness never reads __dict__ or __subclasses__ of anything you give it"


@triton.jit
def neg_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, -tl.load(x_ptr + offs, mask=mask), mask=mask)


def launch(x, out):
    if x.numel() != out.numel():
        raise ValueError("shape mismatch: " + SNIPPETS[0][:2])
    neg_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
