# expect: allow
"""Persistent kernel: one program per SM walks the 2-D tiles with tl.range(start, end, step)."""

import torch
import triton
import triton.language as tl


@triton.jit
def persistent_add_kernel(a_ptr, b_ptr, out_ptr, M, N, stride,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start = tl.program_id(0)
    programs = tl.num_programs(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    num_tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    for tile in tl.range(start, num_tiles, programs):
        rm = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        offs = rm[:, None] * stride + rn[None, :]
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        a = tl.load(a_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, a + b, mask=mask)


def _num_programs(device: torch.device, tiles: int) -> int:
    if device.type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
    else:
        sms = 4
    return max(1, min(sms, tiles))


def launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    M, N = a.shape
    block_m, block_n = 32, 64
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    grid = (_num_programs(a.device, tiles),)
    persistent_add_kernel[grid](a, b, out, M, N, a.stride(0), BLOCK_M=block_m, BLOCK_N=block_n)
