import torch
from task import input_t, output_t
from utils import device, make_match_reference


def ref_kernel(data: input_t) -> output_t:
    """Elementwise sum of two float16 matrices."""
    a, b = data
    return a + b


def generate_input(size: int, seed: int) -> input_t:
    gen = torch.Generator(device=device())
    gen.manual_seed(seed)
    a = torch.randn(size, size, device=device(), dtype=torch.float16, generator=gen)
    b = torch.randn(size, size, device=device(), dtype=torch.float16, generator=gen)
    return a, b


check_implementation = make_match_reference(ref_kernel, rtol=1e-3, atol=1e-3)
