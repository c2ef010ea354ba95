import torch
from utils import device, make_match_reference


def ref_kernel(data: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """C = A @ B for float32 A (m, k) and B (k, n)."""
    a, b = data
    return a @ b


def generate_input(m: int, n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=device())
    gen.manual_seed(seed)
    a = torch.randn(m, k, device=device(), dtype=torch.float32, generator=gen)
    b = torch.randn(k, n, device=device(), dtype=torch.float32, generator=gen)
    return a, b


check_implementation = make_match_reference(ref_kernel, rtol=1e-3, atol=1e-3)
