# expect: allow
"""Vector add through host-side TMA descriptors (triton.tools.tensor_descriptor): the
launcher builds them with TensorDescriptor.from_tensor and with the constructor, the
kernel moves blocks with desc.load / desc.store (out-of-bounds reads are zero, writes
are dropped, so no mask)."""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def add_kernel(x_desc, y_desc, out_desc, BLOCK_SIZE: tl.constexpr):
    off = tl.program_id(axis=0) * BLOCK_SIZE
    x = x_desc.load([off])
    y = y_desc.load([off])
    out_desc.store([off], x + y)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    block = 256  # a TMA box is at most 256 elements along a dimension
    n = out.numel()
    x_desc = TensorDescriptor.from_tensor(x.view(-1), block_shape=[block])
    y_desc = TensorDescriptor(y.view(-1), shape=[n], strides=[1], block_shape=[block])
    out_desc = TensorDescriptor.from_tensor(out.view(-1), [block])
    add_kernel[(triton.cdiv(n, block),)](x_desc, y_desc, out_desc, BLOCK_SIZE=block)
