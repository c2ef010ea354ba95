"""GPU, scan off: computes honestly, and at import starts a detached child (its own session,
stdio closed) that opens a CUDA context of its own and keeps it, a process the runner's
accounting does not own. NVML counts one compute process more than the judge started; the
judge must blame the candidate (the child runs under the runner's uid in the sandbox's pid
namespace), never take it for another job on a shared device (``foreign_gpu_process``)."""

import subprocess
import sys

import torch
import triton
import triton.language as tl

BLOCK = 1024

_CHILD = ("import time, torch\n"
          "x = torch.ones(1, device='cuda')\n"
          "torch.cuda.synchronize()\n"
          "time.sleep(600)\n")
subprocess.Popen([sys.executable, "-c", _CHILD], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
