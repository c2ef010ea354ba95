import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a ReLU activation (KernelBench level 1, problem 19's sizes:
    4096 x 393216 fp32, a 6 GiB input)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 4096
dim = 393216


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
