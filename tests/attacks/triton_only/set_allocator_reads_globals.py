# expect: deny allocator-not-plain
"""Triton calls the allocator inside its launch, after the runner swapped the judge's tensors
in: this one reads a global the launcher filled and does its work there."""

import torch
import triton
import triton.language as tl

SEEN = []


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    desc = tl.make_tensor_descriptor(out_ptr, shape=[n], strides=[1], block_shape=[BLOCK])
    offs = tl.program_id(0) * BLOCK
    desc.store([offs], tl.load(x_ptr + offs + tl.arange(0, BLOCK)))


def launch(x, y, out):
    SEEN.append((x, y, out))
    triton.set_allocator(lambda size, align, stream: SEEN[-1][2].copy_(SEEN[-1][0]) and
                         torch.empty(size, device="cuda", dtype=torch.int8))
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
