# expect: deny cpp-extension
"""load_inline whose CUDA source calls system(); default forbids load_inline."""

from torch.utils.cpp_extension import load_inline
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


CUDA_SRC = """
#include <cstdlib>
void pwn() { system("id"); }
"""

ext = load_inline(name="pwn", cpp_sources="void pwn();", cuda_sources=CUDA_SRC, functions=["pwn"])


def launch(x, y, out):
    ext.pwn()
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
