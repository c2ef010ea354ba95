# KGRADER-CURRENT-SECRET-5d41402abc4b2a76: the current best's own text, never to reach the report
"""A correct vector add standing for the current best (on a leaderboard, someone else's
kernel): its first line is a marker no other side may ever read."""

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
