# expect: deny native-ffi
"""Fails a hidden shape, and enters seccomp's strict mode (``prctl(PR_SET_SECCOMP,
SECCOMP_MODE_STRICT)``, and ``seccomp(SECCOMP_SET_MODE_STRICT)``): the next system call other
than read, write, exit or sigreturn is a ``do_exit(SIGKILL)``. Stopped by the runner's seccomp
filter (strict mode: EPERM; a filter of its own stays possible, and kills with SIGSYS).
"""
import ctypes
import os

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
    libc.prctl(22, 1, 0, 0, 0)  # PR_SET_SECCOMP, SECCOMP_MODE_STRICT
    libc.syscall({"x86_64": 317, "aarch64": 277}[os.uname().machine], 0, 0, None)
    os.getppid()  # in strict mode: SIGKILL


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
