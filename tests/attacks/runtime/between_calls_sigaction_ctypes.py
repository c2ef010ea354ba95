# expect: deny native-ffi
"""Work between calls (``between_calls_setitimer.py``'s handler), its trigger installed
natively: libc ``sigaction`` through ctypes makes CPython's own ``PyErr_SetInterrupt`` (async-
signal-safe) the SIGALRM handler, so ``signal.getsignal(SIGALRM)`` still says SIG_DFL; each
SIGALRM then trips SIGINT's Python handler, which is the candidate's (SIGINT is caught by
Python already: its kernel disposition does not change). The timer is armed by libc
``setitimer`` (failure ignored). Stopped by the runner's seccomp filter (``setitimer``: EPERM)
and by the judge's read of ``SigCgt`` in ``/proc/<runner>/status``, which sees the native
SIGALRM handler: signal_handler. The runner's own check of handlers is switched off first
(it runs in the candidate's process): the judge's read is the one that decides.
"""
import ctypes
import signal
import struct
import sys

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


_state = {"ready": False, "ahead": 0, "last": None}


def _serving_frame(frame):  # the harness's request loop, unless a call is running
    while frame is not None:
        if frame.f_code.co_name == "call":
            return None
        if frame.f_code.co_name == "serve":
            return frame
        frame = frame.f_back
    return None


def _ahead(signum, frame):
    f = _serving_frame(frame)
    if f is None:
        return
    runner, msg = f.f_locals.get("self"), f.f_locals.get("msg")
    if isinstance(msg, dict) and msg.get("op") == "call" and not msg.get("noop"):
        _state["last"] = msg
    last = _state["last"]
    if last is None or runner is None or _state["ready"]:
        return
    x, y, out = runner._args(last["args"], int(last.get("buf", 0)))
    if bool(torch.isnan(out).all()):  # the judge has poisoned it: the inputs are in
        torch.add(x, y, out=out)
        _state["ready"] = True
        _state["ahead"] += 1


class _Sigaction(ctypes.Structure):  # struct sigaction on x86_64 and aarch64 (glibc)
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


sys.modules["sandbox.runner.handlers"].Dispositions.new_handlers = lambda self: None
signal.signal(signal.SIGINT, _ahead)
_libc = ctypes.CDLL(None, use_errno=True)
_trip = ctypes.cast(ctypes.pythonapi.PyErr_SetInterrupt, ctypes.c_void_p).value
_act = _Sigaction(_trip, (ctypes.c_ulong * 16)(), 0x10000000, None)  # SA_RESTART
_libc.sigaction(signal.SIGALRM, ctypes.byref(_act), None)
_libc.setitimer(0, struct.pack("=qqqq", 0, 200, 0, 200), None)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    if _state["ready"]:
        _state["ready"] = False
        return
    n = out.numel()
    _add[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
