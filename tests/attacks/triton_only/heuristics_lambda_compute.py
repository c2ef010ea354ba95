# expect: deny attribute-not-allowed
"""A @triton.heuristics lambda gets the launch's tensors and runs on the host, outside the
kernel body: it computes the answer there."""

import torch
import triton
import triton.language as tl


@triton.heuristics({"DONE": lambda args: args["out_ptr"].copy_(args["x_ptr"].numpy()
                                                              + args["y_ptr"].numpy()) is None})
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, DONE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


def launch(x, y, out):
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
