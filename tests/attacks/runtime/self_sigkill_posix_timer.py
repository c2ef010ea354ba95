# expect: deny native-ffi
"""Fails a hidden shape, and arms a POSIX timer whose signal is SIGKILL (``timer_create`` with
a ``sigevent`` the kernel accepts SIGKILL in), firing 10 ms later. The signal is in memory the
seccomp filter cannot read: the runner's filter refuses ``timer_create`` with any sigevent.
"""
import ctypes
import struct
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
    sev = ctypes.create_string_buffer(struct.pack("=QiiI", 0, 9, 0, 0).ljust(64, b"\0"))
    timer = ctypes.c_void_p(0)
    if libc.timer_create(1, sev, ctypes.byref(timer)) == 0:  # CLOCK_MONOTONIC, SIGEV_SIGNAL
        libc.timer_settime(timer, 0, struct.pack("=qqqq", 0, 0, 0, 10_000_000), None)
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
