# expect: allow
"""Vector add whose prose mentions dangerous things that the code never does.

We deliberately do not call os.system, subprocess.run, eval() or exec() here; do not
`import pickle` either. Timing uses the harness's events, not time.perf_counter.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # note: no os.system("...") and no __import__("os") in this kernel
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


def launch(x, y, out):
    """Launch the kernel. (A reviewer once asked: why not subprocess? Because no.)"""
    # torch.allclose is the judge's business, not ours; sys.exit would be cheating
    add_kernel[(triton.cdiv(out.numel(), 1024),)](x, y, out, out.numel(), BLOCK=1024)
