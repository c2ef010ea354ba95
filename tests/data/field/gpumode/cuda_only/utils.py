"""GPU MODE's utils.py, the part this problem uses."""

import torch


def verbose_allclose(received: torch.Tensor, expected: torch.Tensor, rtol: float,
                     atol: float, max_print: int = 5) -> list[str]:
    """Why ``received`` is not close to ``expected`` (an empty list: it is)."""
    if received.shape != expected.shape:
        return [f"shape {tuple(received.shape)} != expected {tuple(expected.shape)}"]
    r, e = received.double(), expected.double()
    bad = ~torch.isclose(r, e, rtol=rtol, atol=atol)
    if not bad.any():
        return []
    reasons = [f"{int(bad.sum())} mismatched elements"]
    for idx in torch.nonzero(bad)[:max_print]:
        i = tuple(int(v) for v in idx)
        reasons.append(f"at {i}: received {float(r[i]):.6g}, expected {float(e[i]):.6g}")
    return reasons


def match_reference(data, output, reference, rtol: float = 1e-05, atol: float = 1e-08):
    expected = reference(data)
    reasons = verbose_allclose(output, expected, rtol=rtol, atol=atol)
    return len(reasons) == 0, "; ".join(reasons)


def make_match_reference(reference, **kwargs):
    def wrapped(data, output):
        return match_reference(data, output, reference=reference, **kwargs)

    return wrapped


