"""Cheat: a Triton kernel for show, torch's sum for the answer (a library fallback the
triton-only policy forbids)."""

import torch
import triton
import triton.language as tl


@triton.jit
def touch_kernel(out_ptr):
    tl.store(out_ptr, 0.0)


def custom_kernel(data):
    out = torch.empty((), dtype=torch.float32, device=data.device)
    touch_kernel[(1,)](out)
    return data.sum()
