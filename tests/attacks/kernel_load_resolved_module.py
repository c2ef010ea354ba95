# expect: deny file-access-method
"""A module the scan resolves keeps its .load denied inside a kernel even in the
descriptor's call shape (one list): only values are exempt, never a module path."""

import torch
import triton
import triton.language as tl

ser = torch.serialization


@triton.jit
def add_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    ref = ser.load(["/kg/in/reference_outputs.pt"])
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def launch(x, y, out):
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
