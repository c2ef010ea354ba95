# expect: deny signals
"""Fails a hidden shape, and kills its own runner with SIGKILL so that the death reads as an
outside kill (``runner_killed``, the infrastructure's: retried, never the candidate's failure).

Every call of the kill family on its own pid (``kill``, ``tkill``, ``tgkill``,
``rt_sigqueueinfo``, ``rt_tgsigqueueinfo``) and a child it starts that kills its parent.
Stopped by the runner's seccomp filter: SIGKILL is refused even to the runner itself (EPERM),
in the runner and in every process it starts; the outputs stay untouched.
"""
import ctypes
import os
import signal
import struct
import subprocess
import sys
import threading

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
    pid, tid = os.getpid(), threading.get_native_id()
    info = ctypes.create_string_buffer(struct.pack("=iii", 9, 0, -1).ljust(128, b"\0"))
    nr = {"x86_64": (200, 129, 297), "aarch64": (130, 138, 240)}[os.uname().machine]
    for attempt in (lambda: os.kill(pid, signal.SIGKILL),
                    lambda: signal.pthread_kill(threading.get_ident(), signal.SIGKILL),
                    lambda: libc.syscall(nr[0], tid, 9),
                    lambda: libc.syscall(nr[1], pid, 9, info),
                    lambda: libc.syscall(nr[2], pid, tid, 9, info),
                    lambda: subprocess.run([sys.executable, "-c", f"import os; os.kill({pid}, 9)"],
                                           stdin=subprocess.DEVNULL, capture_output=True)):
        try:
            attempt()
        except OSError:
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
