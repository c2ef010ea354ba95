import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear, BatchNorm in training mode, live Dropout, then a scale passed as a plain value."""

    def __init__(self, in_features, out_features, dropout_p):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        return self.dropout(self.bn(self.linear(x))) * scale


batch_size = 8 * 4
in_features = 64
out_features = 32
dropout_p = 0.2
scale = 2.0


def get_inputs():
    return [torch.randn(batch_size, in_features), scale]


def get_init_inputs():
    return [in_features, out_features, dropout_p]
