# expect: deny attribute-not-allowed
"""A class pattern's keyword sub-patterns read attributes: case object(numpy=f) is
getattr(subject, "numpy") without an attribute in the source."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def launch(x, y, out):
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    match (x, y, out):
        case (object(numpy=a), object(numpy=b), object(numpy=c)):
            c()[...] = a() + b() + 1
