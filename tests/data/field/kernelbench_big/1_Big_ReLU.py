import torch
import torch.nn as nn


class Model(nn.Module):
    """A ReLU over 288 MiB of float32 input (KernelBench level 1 style, sizes as products)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 1024 * 18
dim = 4096


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
