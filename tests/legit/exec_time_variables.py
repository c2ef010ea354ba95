# expect: allow
"""Names that contain dangerous words as substrings: exec_time, eval_count, system_size."""

import torch
import triton
import triton.language as tl

exec_time = 0.0
eval_count = 0
system_size = 1 << 20
compile_flags = {"num_warps": 4}
opened = False


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def launch(x, out):
    global eval_count
    eval_count += 1
    popen_like = min(system_size, out.numel())
    copy_kernel[(triton.cdiv(popen_like, 1024),)](x, out, popen_like, BLOCK=1024, **compile_flags)
