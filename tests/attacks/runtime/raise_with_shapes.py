# expect: allow
"""Correct on the tune shape, and on any other shape raises with the shape it was given.

A candidate called on a hidden shape can publish it: the message travels into the
report, the agent tools' results, the experience store and a leaderboard page. The judge
marks the failure as one on a hidden shape; every candidate-facing copy says "hidden
shape #k" and withholds the text (grader/grading/redact.py), the operator's keeps it.
"""

import torch
import triton
import triton.language as tl

BLOCK = 1024
TUNE = (64, 1024)  # examples/vector_add_small's tune shape


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    if tuple(x.shape) != TUNE:
        raise RuntimeError(f"saw {x.shape}")
    n = out.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
