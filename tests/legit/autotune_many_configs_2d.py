# expect: allow
"""2-D tiled scale-and-bias with many autotune configs, a `key=` and a 2-D grid lambda."""

import torch
import triton
import triton.language as tl
from triton import cdiv


def _configs():
    out = []
    for bm in (16, 32, 64):
        for bn in (32, 64, 128):
            warps = 4 if bm * bn <= 2048 else 8
            out.append(triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=2))
    return out


@triton.autotune(configs=_configs(), key=["M", "N"])
@triton.jit
def scale_bias_kernel(x_ptr, scale_ptr, bias_ptr, out_ptr, M, N, stride_xm, stride_om,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * stride_xm + rn[None, :], mask=mask, other=0.0)
    s = tl.load(scale_ptr + rm, mask=rm < M, other=0.0)
    b = tl.load(bias_ptr + rn, mask=rn < N, other=0.0)
    y = x.to(tl.float32) * s[:, None].to(tl.float32) + b[None, :].to(tl.float32)
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)


def launch(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
    """out[m, n] = x[m, n] * scale[m] + bias[n]; x and out row-major."""
    M, N = x.shape
    grid = lambda meta: (cdiv(M, meta["BLOCK_M"]), cdiv(N, meta["BLOCK_N"]))
    scale_bias_kernel[grid](x, scale, bias, out, M, N, x.stride(0), out.stride(0))
