# expect: deny native-ffi
"""Fails a hidden shape, and signals its own process group through a pseudo-terminal it makes
its controlling terminal (the runner leads a session of its own): ``ioctl(master, TIOCSIG,
SIGKILL)``. The kernel allows only SIGINT, SIGQUIT and SIGTSTP there (EINVAL); the runner's
seccomp filter refuses SIGKILL through TIOCSIG too (EPERM).
"""
import ctypes
import fcntl
import os
import termios
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
    master, slave = os.openpty()
    try:
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    except OSError:
        pass
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ioctl(master, 0x40045436, 9)  # TIOCSIG, SIGKILL
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
