"""A replica of GPU MODE's pmpp histogram (v2 layout): uint8 data with a share of one
"evil" value (contention), and a preallocated int32 output of 256 bins."""

import torch
from utils import device, make_match_reference


def ref_kernel(data):
    """Counts of each byte value, written into the output buffer the data carries."""
    values, output = data
    output[...] = torch.bincount(values.to(torch.int64), minlength=256)
    return output


def generate_input(size: int, contention: float, seed: int):
    gen = torch.Generator(device=device())
    gen.manual_seed(seed)
    values = torch.randint(0, 256, (size,), device=device(), dtype=torch.uint8, generator=gen)
    evil_value = torch.randint(0, 256, (), device=device(), dtype=torch.uint8, generator=gen)
    evil_loc = torch.rand((size,), device=device(), generator=gen) < (contention / 100.0)
    values[evil_loc] = evil_value
    output = torch.empty(256, device=device(), dtype=torch.int32).contiguous()
    return values.contiguous(), output


check_implementation = make_match_reference(ref_kernel)
