import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer, then a clamp to [min_value, max_value] with min_value = max_value = 0:
    the output is zero whatever the input (as KernelBench level 2 problem 83's is)."""

    def __init__(self, in_features, out_features, min_value, max_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.min_value = min_value
        self.max_value = max_value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(self.linear(x), min=self.min_value, max=self.max_value)


batch_size = 16
in_features = 32
out_features = 24
min_value = 0.0
max_value = 0.0


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, min_value, max_value]
