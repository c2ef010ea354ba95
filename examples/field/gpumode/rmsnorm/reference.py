import torch
from utils import device, make_match_reference

EPS = 1e-6


def ref_kernel(data: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """RMS normalisation of each row of x, scaled by weight."""
    x, weight = data
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS) * weight


def generate_input(batch: int, hidden: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=device())
    gen.manual_seed(seed)
    x = torch.randn(batch, hidden, device=device(), dtype=torch.float32, generator=gen)
    weight = 1.0 + 0.1 * torch.randn(hidden, device=device(), dtype=torch.float32, generator=gen)
    return x, weight


check_implementation = make_match_reference(ref_kernel, rtol=1e-4, atol=1e-4)
