"""Wrong: scales by the right standard deviation but forgets to subtract the mean."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, H, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < H
    x = tl.load(x_ptr + row * H + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / H
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / H
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(out_ptr + row * H + cols, x / tl.sqrt(var + eps) * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows, H = x.shape
        out = torch.empty_like(x)
        layernorm_kernel[(rows,)](x, self.ln.weight, self.ln.bias, out, H, self.ln.eps,
                                  BLOCK=triton.next_power_of_2(H))
        return out
