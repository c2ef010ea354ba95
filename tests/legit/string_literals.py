# expect: allow
"""String literals that contain code-looking text are data, not code."""

import torch
import triton
import triton.language as tl

BANNER = "eval(expression) and os.system('ls') are not used here"
SNIPPETS = ["import subprocess", "importlib.import_module('os')", "open('/proc/1/environ')",
            "exec(code)"]
HELP = """
Usage: the harness calls launch(x, out); it never calls exec( or compile( on anything.
"""


@triton.jit
def neg_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, -tl.load(x_ptr + offs, mask=mask), mask=mask)


def launch(x, out):
    if x.numel() != out.numel():
        raise ValueError("shape mismatch: " + BANNER[:4])
    neg_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
