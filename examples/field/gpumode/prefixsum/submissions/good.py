"""Correct: a blocked float32 scan (scan each block, then add the blocks' carried
offsets), written into the float32 output buffer; GPU MODE's check passes it."""

import torch

BLOCK = 256


def custom_kernel(data):
    values, output = data
    n = values.numel()
    pad = (-n) % BLOCK
    blocks = torch.nn.functional.pad(values, (0, pad)).view(-1, BLOCK)
    inner = torch.cumsum(blocks, dim=1)
    carry = torch.cumsum(inner[:, -1], dim=0) - inner[:, -1]
    output.copy_((inner + carry[:, None]).reshape(-1)[:n])
    return output
