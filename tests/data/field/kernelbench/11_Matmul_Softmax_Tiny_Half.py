import torch
import torch.nn as nn


class Model(nn.Module):
    """A float16 matmul, a softmax of damped scores over a wide row (near 1/2048 each) and a
    scale: every output is far below KernelBench's float16 tolerance (1e-2)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.softmax((a @ b) * 0.01, dim=1) * 0.5


M = 16
K = 32
N = 2048


def get_inputs():
    a = torch.randn(M, K, dtype=torch.float16)
    b = torch.randn(K, N, dtype=torch.float16)
    return [a, b]


def get_init_inputs():
    return []
