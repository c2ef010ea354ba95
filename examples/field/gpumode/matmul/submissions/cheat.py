"""Cheat: cuBLAS through the @ operator (a library fallback the triton-only policy forbids)."""

import torch
import triton
import triton.language as tl


@triton.jit
def touch_kernel(out_ptr):
    tl.store(out_ptr, 0.0)


def custom_kernel(data):
    a, b = data
    scratch = torch.empty(1, dtype=torch.float32, device=a.device)
    touch_kernel[(1,)](scratch)
    return a @ b
