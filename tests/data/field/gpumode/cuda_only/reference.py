import torch
from utils import make_match_reference


def ref_kernel(data: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Elementwise sum of two float32 vectors."""
    a, b = data
    return a + b


def generate_input(size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    # As GPU MODE's problems do: the generator lives on the GPU, whatever the host.
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    a = torch.randn(size, device="cuda", dtype=torch.float32, generator=gen)
    b = torch.randn(size, device="cuda", dtype=torch.float32, generator=gen)
    return a, b


check_implementation = make_match_reference(ref_kernel, rtol=1e-5, atol=1e-5)
