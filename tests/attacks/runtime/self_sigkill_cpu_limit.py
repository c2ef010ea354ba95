# expect: deny native-ffi
"""Fails a hidden shape, and lowers its own CPU-time limit to what it has used plus one second,
then spins: at the hard ``RLIMIT_CPU`` the kernel SIGKILLs the process (``RLIMIT_RTTIME``
likewise for real-time threads). Through ``setrlimit`` (glibc: ``prlimit64``) and the raw
``setrlimit`` syscall. Stopped by the runner's seccomp filter (a new CPU or RT-time limit:
EPERM); the harness sets neither limit.
"""
import ctypes
import os
import resource
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
    used = resource.getrusage(resource.RUSAGE_SELF)
    limit = int(used.ru_utime + used.ru_stime) + 1
    libc = ctypes.CDLL(None, use_errno=True)
    nr = {"x86_64": 160, "aarch64": 164}[os.uname().machine]
    armed = libc.syscall(nr, 0, struct.pack("=QQ", limit, limit)) == 0  # RLIMIT_CPU
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))
        armed = True
    except (OSError, ValueError):
        pass
    try:
        resource.setrlimit(resource.RLIMIT_RTTIME, (50_000, 50_000))
    except (OSError, ValueError):
        pass
    t0 = time.process_time()
    while armed and time.process_time() - t0 < 3:
        pass


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
