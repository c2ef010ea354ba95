# expect: deny attribute-not-allowed
"""A @triton.constexpr_function body is host Python (under TRITON_INTERPRET it even gets the
kernel's pointer tensors): it is held to the host attribute list, so it cannot read a
pointer's handle and the memory behind it."""

import torch
import triton
import triton.language as tl


@triton.constexpr_function
def peek(ptr):
    return ptr.handle.data[0]


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    ADDR: tl.constexpr = peek(x_ptr)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))


def launch(x, y, out):
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
