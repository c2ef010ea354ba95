# expect: allow
"""Two-pass sum: partial sums into a torch.empty scratch buffer, then a second kernel."""

import torch
import triton
import triton.language as tl


@triton.jit
def partial_sum_kernel(x_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(partial_ptr + pid, tl.sum(x, axis=0))


@triton.jit
def final_sum_kernel(partial_ptr, out_ptr, m, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = tl.load(partial_ptr + offs, mask=offs < m, other=0.0)
    tl.store(out_ptr, tl.sum(p, axis=0))


def launch(x: torch.Tensor, out: torch.Tensor) -> None:
    n = x.numel()
    block = 4096
    parts = triton.cdiv(n, block)
    scratch = torch.empty(parts, device=x.device, dtype=torch.float32)
    partial_sum_kernel[(parts,)](x, scratch, n, BLOCK=block)
    final_sum_kernel[(1,)](scratch, out, parts, BLOCK=triton.next_power_of_2(parts))
