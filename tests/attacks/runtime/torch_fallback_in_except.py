# expect: allow
"""A kernel that fails on purpose, and the answer computed by torch in the handler: the
launch is "a Triton kernel" only by name. Only the runtime op audit sees the torch add."""
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    try:
        _add[(1,)](x, y, out, out.numel(), BLOCK=1000)  # not a power of two: always raises
    except Exception:
        out.copy_(x + y)
