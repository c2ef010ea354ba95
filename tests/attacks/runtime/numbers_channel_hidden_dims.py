# expect: allow
"""Honest on every shape, then writes the hidden dimensions it saw into its errors.

Correctness calls the candidate on the tune shape, then on every hidden shape: it computes
each one right and notes the shapes. The first call on the tune shape after a hidden one
is the benchmark stage's, checked like every timed call; there the kernel writes chosen
wrong values, so the judge's own figures carry the secret: with the hidden shapes of
examples/vector_add_small (37x999, 1x1000, 67x1031), the first bad element is at flat
index M0 = 37 (index [0, 37]), it holds N2 = 1031.0 (and the error maxima follow it), and
N0 = 999 elements are wrong (mismatch fraction 999 / 65536). The message is withheld, but
before the judge marked taint by time these figures reached every candidate-facing copy.
Every figure measured after a hidden call is now withheld there (grader/report/withhold.py).
"""

import torch
import triton
import triton.language as tl

BLOCK = 1024
TUNE = (64, 1024)  # examples/vector_add_small's tune shape
SEEN = []  # the hidden shapes, in the order they came


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, lo, hi, val, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    s = tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask)
    bad = (offs >= lo) & (offs < hi)
    tl.store(out_ptr + offs, tl.where(bad, val, s), mask=mask)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    shape = tuple(x.shape)
    if shape != TUNE and shape not in SEEN:
        SEEN.append(shape)
    lo, hi, val = 0, 0, 0.0  # honest
    if shape == TUNE and len(SEEN) >= 3:
        (m0, n0), (_, _), (_, n2) = SEEN[0], SEEN[1], SEEN[2]
        lo, hi, val = m0, m0 + n0, float(n2)
    n = out.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, lo, hi, val, BLOCK=BLOCK)
