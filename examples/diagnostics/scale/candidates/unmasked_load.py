"""Reads past the end of its input: the load of the last block has no mask.

Every value it writes is right (the store is masked), and reading leaves no trace in
memory, so neither the ordinary checks nor the judge's guard bands (which see writes)
notice. Only the memory checker does (``kgrader run --sanitize``: the sanitized runner
works on exactly sized private copies, so the overrun leaves the allocation;
correctness fails with ``out_of_bounds_access``). GPU only: the CPU interpreter does not
check, and may crash on, out-of-bounds loads.
"""

import torch
import triton
import triton.language as tl

BLOCK = 64


@triton.jit
def scale_unmasked_load_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)  # no mask: the tail of the last block reads past the input
    tl.store(out_ptr + offs, x * 2.0, mask=offs < n)


def launch(x: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    scale_unmasked_load_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, BLOCK=BLOCK)
