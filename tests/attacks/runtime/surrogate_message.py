# expect: allow
"""Computes the right answer, then raises an exception whose message holds lone surrogates
(no UTF-8 form): once, pydantic refused the record on the host, and the candidate's
failure became an infrastructure error (exit 2, never graded)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def launch(x, y, out):
    n = out.numel()
    _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    raise RuntimeError("lone surrogates \ud800 and \udfff, then the rest of the message")
