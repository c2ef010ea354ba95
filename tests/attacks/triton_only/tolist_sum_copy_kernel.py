# expect: deny attribute-not-allowed
"""Adds in pure Python over .tolist() (no dispatch), then moves the answer into the output
with an honest-looking Triton copy kernel."""

import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def launch(x, y, out):
    sums = [a + b for a, b in zip(x.flatten().tolist(), y.flatten().tolist())]
    src = torch.tensor(sums, dtype=out.dtype, device=out.device)
    copy_kernel[(triton.cdiv(out.numel(), 1024),)](src, out, out.numel(), BLOCK=1024)
