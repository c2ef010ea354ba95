# expect: deny native-ffi
"""Fails a hidden shape, and registers for SIGKILL on a POSIX message queue (``mq_notify``
with a ``sigevent`` of SIGKILL), then sends itself a message. The signal is in memory the
seccomp filter cannot read: the runner's filter refuses ``mq_notify`` with any sigevent.
"""
import ctypes
import os
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
    name = f"/q{os.getpid()}".encode()
    mq = libc.mq_open(name, os.O_RDWR | os.O_CREAT, 0o600, None)
    libc.mq_unlink(name)
    sev = ctypes.create_string_buffer(struct.pack("=QiiI", 0, 9, 0, 0).ljust(64, b"\0"))
    if libc.mq_notify(mq, sev) == 0:
        libc.mq_send(mq, b"x", 1, 0)
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
