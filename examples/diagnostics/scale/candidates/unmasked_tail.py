"""Writes past the end of its output: the store of the last block has no mask.

BLOCK is 64 float32 = 256 bytes, the judge's slot alignment, so the over-write always
lands in the slack after ``out`` inside the judge's buffer: every output value is right,
and before guard bands nothing saw it. The judge's guard bands catch it now
(``out_of_bounds_write``); the memory checker does too (``kgrader run --sanitize``:
``out_of_bounds_access``). ``unmasked_load.py`` is the overrun only the memory checker
sees. GPU only: the CPU interpreter does not check, and crashes on, out-of-bounds stores.
"""

import torch
import triton
import triton.language as tl

BLOCK = 64


@triton.jit
def scale_unmasked_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x * 2.0)  # no mask: the tail of the last block overruns


def launch(x: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    scale_unmasked_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
