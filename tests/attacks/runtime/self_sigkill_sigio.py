# expect: deny os-module
"""Fails a hidden shape, and has the kernel SIGKILL its runner through asynchronous I/O: a pipe
owned by the runner (``F_SETOWN``, ``O_ASYNC``) whose I/O signal is SIGKILL (``F_SETSIG``),
then a write to it (dnotify and lease breaks send the same signal). Stopped by the runner's
seccomp filter (``fcntl(F_SETSIG, SIGKILL)``: EPERM).
"""
import fcntl
import os
import time

import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def _die() -> None:
    r, w = os.pipe()
    fcntl.fcntl(r, fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(r, 10, 9)  # F_SETSIG, SIGKILL (refused: raises, and no SIGIO is armed)
    fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
    os.write(w, b"x")
    time.sleep(0.5)


_TUNE = (64, 1024)  # the shape it was tuned on; any other is a hidden one it would fail


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    if tuple(out.shape) == _TUNE:
        n = out.numel()
        _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return
    try:
        _die()
    except Exception:  # refused (EPERM): nothing was computed, and nothing will be
        pass
