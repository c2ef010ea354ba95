"""Wrong: the last chunk of values is never counted."""

import torch


def custom_kernel(data):
    values, output = data
    counts = torch.zeros(256, dtype=torch.int64, device=values.device)
    for chunk in values.split(512)[:-1]:
        counts += torch.bincount(chunk.to(torch.int64), minlength=256)
    output.copy_(counts)
    return output
