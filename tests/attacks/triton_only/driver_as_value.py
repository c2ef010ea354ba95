# expect: deny module-as-value
"""Triton's driver config handed to a helper as a value, where its attributes are no
longer the dotted names the allow-list judges."""

import torch
import triton
import triton.language as tl
from triton.runtime import driver


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))


def backend(d):
    return d.active


def launch(x, y, out):
    backend(driver)
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
