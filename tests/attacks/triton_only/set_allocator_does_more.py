# expect: deny allocator-not-plain
"""An allocator function that does more than allocate: it keeps a global reference and its
allocation's device comes from a global tensor."""

import torch
import triton
import triton.language as tl

KEEP = []


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    desc = tl.make_tensor_descriptor(out_ptr, shape=[n], strides=[1], block_shape=[BLOCK])
    offs = tl.program_id(0) * BLOCK
    desc.store([offs], tl.load(x_ptr + offs + tl.arange(0, BLOCK)))


def alloc(size, align, stream):
    KEEP.append(size)
    return torch.empty(size, device=KEEP[0], dtype=torch.int8)


def launch(x, y, out):
    triton.set_allocator(alloc)
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
