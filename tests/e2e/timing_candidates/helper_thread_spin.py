"""Correct, but its kernel runs on a helper thread while the calling thread spins: on a
busy CPU the caller's wait for a CPU is then the helper's work. The judge must not take
that wait off the time (a thread created in the call: no correction at all)."""

import threading

import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    t = threading.Thread(target=lambda: _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024))
    t.start()
    while t.is_alive():
        pass
    t.join()
