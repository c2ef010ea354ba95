# expect: allow
"""An `if __name__ == "__main__":` self-test block that only allocates and launches."""

import torch
import triton
import triton.language as tl


@triton.jit
def iota_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs.to(tl.float32), mask=offs < n)


def launch(out):
    iota_kernel[(triton.cdiv(out.numel(), 256),)](out, out.numel(), BLOCK=256)


if __name__ == "__main__":
    buf = torch.empty(1000, device="cuda" if torch.cuda.is_available() else "cpu")
    launch(buf)
    torch.cuda.synchronize()
    print(buf.shape, buf.dtype)
