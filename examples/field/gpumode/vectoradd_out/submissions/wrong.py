"""Wrong: the output buffer gets A - B."""

import torch


def custom_kernel(data):
    a, b, c = data
    torch.sub(a, b, out=c)
    return c
