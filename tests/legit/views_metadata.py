# expect: allow
"""Views and metadata on tensors are fine: view, reshape, contiguous, stride, data_ptr ..."""

import torch
import triton
import triton.language as tl


@triton.jit
def transpose_kernel(x_ptr, out_ptr, M, N, sxm, sxn, som, son, BLOCK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK + tl.arange(0, BLOCK)
    rn = pid_n * BLOCK + tl.arange(0, BLOCK)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(x_ptr + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask)
    tl.store(out_ptr + rn[None, :] * som + rm[:, None] * son, tile, mask=mask)


def launch(x: torch.Tensor, out: torch.Tensor) -> None:
    assert x.is_contiguous() and out.dtype == x.dtype and out.device == x.device
    assert x.data_ptr() % 16 == 0 and x.element_size() in (2, 4)
    x2 = x.view(x.size(0), -1).contiguous()
    o2 = out.reshape(x2.shape[1], x2.shape[0])
    M, N = x2.shape
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    transpose_kernel[grid](x2, o2, M, N, x2.stride(0), x2.stride(1), o2.stride(0), o2.stride(1),
                           BLOCK=32)
    assert o2.numel() == x.numel() and o2.dim() == 2 and o2.ndim == 2
