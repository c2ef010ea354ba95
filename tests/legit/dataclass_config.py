# expect: allow
"""A frozen dataclass carries the launch configuration."""

from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class LaunchConfig:
    block: int = 1024
    num_warps: int = 4
    tags: tuple[str, ...] = field(default_factory=tuple)

    def grid(self, n: int) -> tuple[int]:
        return (triton.cdiv(n, self.block),)


@triton.jit
def mul_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * tl.load(y_ptr + offs, mask=mask),
             mask=mask)


CFG = LaunchConfig(tags=("fp16",))


def launch(x, y, out):
    mul_kernel[CFG.grid(out.numel())](x, y, out, out.numel(), BLOCK=CFG.block,
                                      num_warps=CFG.num_warps)
