# expect: allow
"""Row L2-normalisation: autotune over num_warps, then @triton.heuristics for the block."""

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({}, num_warps=w) for w in (1, 2, 4, 8)],
    key=["n_cols"],
)
@triton.heuristics({
    "BLOCK": lambda args: triton.next_power_of_2(args["n_cols"]),
    "EVEN": lambda args: args["n_cols"] == triton.next_power_of_2(args["n_cols"]),
})
@triton.jit
def l2norm_rows_kernel(x_ptr, out_ptr, n_cols, stride, eps, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    if EVEN:
        x = tl.load(x_ptr + row * stride + cols).to(tl.float32)
    else:
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) + eps)
    tl.store(out_ptr + row * stride + cols, (x * inv).to(out_ptr.dtype.element_ty), mask=cols < n_cols)


def launch(x: torch.Tensor, out: torch.Tensor) -> None:
    rows, cols = x.shape
    l2norm_rows_kernel[(rows,)](x, out, cols, x.stride(0), 1e-12)
