# expect: allow
"""LayerNorm forward: mean and variance inside the kernel, rsqrt from tl.math."""

import torch
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    diff = tl.where(mask, x - mean, 0.0)
    var = tl.sum(diff * diff, axis=0) / n_cols
    rstd = tl.math.rsqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(out_ptr + row * stride + cols, diff * rstd * w + b, mask=mask)


def launch(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
    x2 = x.reshape(-1, x.shape[-1])
    rows, cols = x2.shape
    layernorm_kernel[(rows,)](x2, weight, bias, out, x2.stride(0), cols, 1e-5,
                              BLOCK=triton.next_power_of_2(cols))
