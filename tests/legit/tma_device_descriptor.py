# expect: allow
"""Vector add through device-side TMA descriptors: the kernel builds them with
tl.make_tensor_descriptor, whose workspace Triton asks of the allocator the launcher
registers with triton.set_allocator (size, alignment, stream) -> a byte buffer."""

from typing import Optional

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[n_elements], strides=[1],
                                       block_shape=[BLOCK_SIZE])
    y_desc = tl.make_tensor_descriptor(y_ptr, shape=[n_elements], strides=[1],
                                       block_shape=[BLOCK_SIZE])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[n_elements], strides=[1],
                                         block_shape=[BLOCK_SIZE])
    off = tl.program_id(axis=0) * BLOCK_SIZE
    out_desc.store([off], x_desc.load([off]) + y_desc.load([off]))


def alloc_workspace(size: int, alignment: int, stream: Optional[int]) -> torch.Tensor:
    return torch.empty(size, device="cuda", dtype=torch.int8)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    triton.set_allocator(alloc_workspace)
    n = out.numel()
    block = 256
    add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK_SIZE=block)
