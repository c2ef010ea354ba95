"""A replica of GPU MODE's pmpp prefixsum (v2 layout): a float32 input and a float32
output buffer; the reference scans in float64 and returns that, and the checker scales its
tolerance with sqrt(n), so a float32 scan passes."""

import torch
from utils import device, verbose_allclose


def ref_kernel(data):
    """The inclusive prefix sum, in float64 (the output buffer is not used)."""
    values, output = data
    return torch.cumsum(values.to(torch.float64), dim=0)


def generate_input(size: int, seed: int):
    gen = torch.Generator(device=device())
    gen.manual_seed(seed)
    values = torch.randn(size, device=device(), dtype=torch.float32, generator=gen).contiguous()
    output = torch.empty(size, device=device(), dtype=torch.float32).contiguous()
    return values, output


def check_implementation(data, output):
    expected = ref_kernel(data)
    n = data[0].numel()
    reasons = verbose_allclose(output.to(torch.float64), expected, rtol=1e-5,
                               atol=1e-5 * n ** 0.5)
    if reasons:
        return False, "mismatch found! custom implementation doesn't match reference: " + \
            "; ".join(reasons)
    return True, ""
