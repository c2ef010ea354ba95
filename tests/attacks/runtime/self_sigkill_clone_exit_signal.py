# expect: deny native-ffi
"""Fails a hidden shape, and has the kernel SIGKILL its runner: a child made by ``clone`` whose
exit-signal byte (``flags & CSIGNAL``) is SIGKILL, which the parent receives when the child
exits. Stopped by the runner's seccomp filter (``clone`` with that exit signal: EPERM).
"""
import ctypes
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
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    nr = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
    child = libc.syscall(ctypes.c_long(nr), ctypes.c_long(9), 0, 0, 0, 0)  # fork, exit signal 9
    if child == 0:
        os._exit(0)
    time.sleep(0.5)  # the child's exit lands here


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
