"""Wrong: drops the reduced dimension (returns (B, D2), not (B, 1, D2))."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_dim1_kernel(x_ptr, out_ptr, D1, D2, B1: tl.constexpr, B2: tl.constexpr):
    b = tl.program_id(0)
    i = tl.arange(0, B1)[:, None]
    j = tl.arange(0, B2)[None, :]
    vals = tl.load(x_ptr + b * D1 * D2 + i * D2 + j, mask=(i < D1) & (j < D2), other=0.0)
    cols = tl.arange(0, B2)
    tl.store(out_ptr + b * D2 + cols, tl.sum(vals, axis=0), mask=cols < D2)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, D1, D2 = x.shape
        out = torch.empty((B, D2), dtype=x.dtype, device=x.device)
        sum_dim1_kernel[(B,)](x, out, D1, D2, B1=triton.next_power_of_2(D1),
                              B2=triton.next_power_of_2(D2))
        return out
