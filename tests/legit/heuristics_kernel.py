# expect: allow
"""@triton.heuristics computes a constexpr from the arguments."""

import torch
import triton
import triton.language as tl


@triton.heuristics({"EVEN_N": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def abs_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN_N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN_N:
        tl.store(out_ptr + offs, tl.abs(tl.load(x_ptr + offs)))
    else:
        mask = offs < n
        tl.store(out_ptr + offs, tl.abs(tl.load(x_ptr + offs, mask=mask)), mask=mask)


def launch(x, out):
    abs_kernel[(triton.cdiv(x.numel(), 512),)](x, out, x.numel(), BLOCK=512)
