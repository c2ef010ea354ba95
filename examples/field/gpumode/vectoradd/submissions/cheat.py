"""Cheat: launches a Triton kernel for show, then returns torch's own sum. The operator
passes the static scan; the runtime op audit of a triton-only task sees aten.add."""

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
    return a + b
