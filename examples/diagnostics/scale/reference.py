"""Trusted reference for diag_scale: out = 2 * x (float32)."""

import torch


def launch(x: torch.Tensor, out: torch.Tensor) -> None:
    torch.mul(x, 2.0, out=out)
