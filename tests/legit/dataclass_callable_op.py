# expect: allow
"""A @dataclass config with __post_init__, a class with __init__/__call__, an enum, a main guard."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl


class Activation(enum.Enum):
    NONE = 0
    RELU = 1
    LEAKY = 2


@dataclass(frozen=True)
class BiasActConfig:
    block: int = 512
    num_warps: int = 4
    activation: Activation = Activation.RELU
    slope: float = 0.01
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.block & (self.block - 1):
            raise ValueError(f"block must be a power of two, got {self.block}")


@triton.jit
def bias_act_kernel(x_ptr, b_ptr, out_ptr, n, n_cols, slope, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(x_ptr + offs, mask=mask).to(tl.float32) + tl.load(b_ptr + offs % n_cols, mask=mask).to(tl.float32)
    if ACT == 1:
        y = tl.maximum(y, 0.0)
    elif ACT == 2:
        y = tl.where(y > 0, y, y * slope)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class BiasAct:
    def __init__(self, config: BiasActConfig | None = None) -> None:
        self.config = config or BiasActConfig()

    def __call__(self, x: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
        cfg = self.config
        n = x.numel()
        bias_act_kernel[(triton.cdiv(n, cfg.block),)](
            x, bias, out, n, bias.numel(), cfg.slope, ACT=cfg.activation.value, BLOCK=cfg.block,
            num_warps=cfg.num_warps)


_OP = BiasAct(BiasActConfig(activation=Activation.LEAKY, notes=("leaky",)))


def launch(x: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
    _OP(x, bias, out)


if __name__ == "__main__":
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.ones(4, 8, device=dev)
    b = torch.full((8,), -2.0, device=dev)
    c = torch.empty_like(a)
    launch(a, b, c)
    print(c.shape, c.dtype, c[0, :4])
