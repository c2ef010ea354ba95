import torch
from utils import device, make_match_reference


def ref_kernel(data):
    """y = x @ weight.T + bias, written into the output buffer the data carries."""
    x, weight, bias, out = data
    out.copy_(x @ weight.T + bias)
    return out


def generate_input(batch: int, in_features: int, out_features: int, seed: int):
    gen = torch.Generator(device=device())
    gen.manual_seed(seed)
    x = torch.randn(batch, in_features, device=device(), dtype=torch.float32, generator=gen)
    weight = torch.randn(out_features, in_features, device=device(), dtype=torch.float32,
                         generator=gen) / in_features ** 0.5
    bias = torch.randn(out_features, device=device(), dtype=torch.float32, generator=gen)
    out = torch.empty(batch, out_features, device=device(), dtype=torch.float32)
    return x, weight, bias, out


check_implementation = make_match_reference(ref_kernel, rtol=1e-3, atol=1e-3)
