# expect: allow
"""Configuration tables at module level, chosen by dtype and size; constexpr block sizes."""

import torch
import triton
import triton.language as tl

CONFIGS = {
    torch.float16: {"BLOCK": 2048, "num_warps": 8},
    torch.bfloat16: {"BLOCK": 2048, "num_warps": 8},
    torch.float32: {"BLOCK": 1024, "num_warps": 4},
}
SMALL = 1 << 12


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        x = tl.load(x_ptr + offs)
        tl.store(out_ptr + offs, x * alpha)
    else:
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x * alpha, mask=mask)


def launch(x: torch.Tensor, out: torch.Tensor, alpha: float = 2.0) -> None:
    cfg = dict(CONFIGS[x.dtype])
    if x.numel() < SMALL:
        cfg["BLOCK"] = 256
    n = x.numel()
    scale_kernel[(triton.cdiv(n, cfg["BLOCK"]),)](
        x, out, n, alpha, BLOCK=cfg["BLOCK"], EVEN=n % cfg["BLOCK"] == 0, num_warps=cfg["num_warps"])
