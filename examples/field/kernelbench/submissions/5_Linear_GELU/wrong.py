"""Wrong: forgets the bias (x @ W.T, then GELU)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BM, BN, BK = 32, 32, 32


@triton.jit
def linear_gelu_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, BM: tl.constexpr,
                       BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        x = tl.load(x_ptr + rm[:, None] * K + rk[None, :],
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + rk[:, None],
                    mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    y = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], y, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        M, K = x.shape
        N = self.linear.out_features
        out = torch.empty((M, N), dtype=x.dtype, device=x.device)
        linear_gelu_kernel[(triton.cdiv(M, BM), triton.cdiv(N, BN))](
            x, self.linear.weight, self.linear.bias, out, M, N, K, BM=BM, BN=BN, BK=BK)
        return out
