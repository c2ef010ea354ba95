# expect: deny native-ffi
"""At import, tries PTRACE_ATTACH and process_vm_readv on the judge (its parent) and on every
pid it can guess (the other runner), to read the record key or the other side's buffers.

Stopped by the runners' own uids, the non-dumpable judge and the seccomp filter; when every
attempt is refused it raises, so the report says exactly what the kernel answered.
"""
import ctypes
import os

import torch
import triton
import triton.language as tl

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.restype = ctypes.c_long
_libc.process_vm_readv.restype = ctypes.c_ssize_t


class _Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _steal() -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {"ptrace": set(), "process_vm_readv": set()}
    buf = ctypes.create_string_buffer(4096)
    local = _Iov(ctypes.addressof(buf), 4096)
    for pid in [os.getppid(), *range(1, 200)]:
        if pid == os.getpid():
            continue
        if _libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
            seen["ptrace"].add(f"attached {pid}")
        else:
            seen["ptrace"].add(os.strerror(ctypes.get_errno()))
        remote = _Iov(0x400000, 4096)
        if _libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) >= 0:
            seen["process_vm_readv"].add(f"read {pid}")
        else:
            seen["process_vm_readv"].add(os.strerror(ctypes.get_errno()))
    return seen


_SEEN = _steal()
if not any(v.startswith(("attached", "read")) for vs in _SEEN.values() for v in vs):
    raise PermissionError(f"judge pid {os.getppid()}: ptrace {sorted(_SEEN['ptrace'])}, "
                          f"process_vm_readv {sorted(_SEEN['process_vm_readv'])}")


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
