# expect: deny attribute-not-allowed
"""A host TensorDescriptor holds its tensor: its fields are not on the attribute list,
so the descriptor is no way around .numpy() and friends."""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def add_kernel(x_desc, out_desc, BLOCK: tl.constexpr):
    off = tl.program_id(0) * BLOCK
    out_desc.store([off], x_desc.load([off]))


def launch(x, y, out):
    xd = TensorDescriptor.from_tensor(x.view(-1), [256])
    od = TensorDescriptor.from_tensor(out.view(-1), [256])
    base = od.base
    add_kernel[(triton.cdiv(x.numel(), 256),)](xd, od, BLOCK=256)
    base.add_(y.view(-1))
