# expect: deny signals
"""Work between calls (``between_calls_setitimer.py``'s handler), its timer armed through
ctypes, past Python's ``signal`` module: a POSIX timer (``timer_create`` with a NULL sigevent:
SIGALRM), else ``setitimer``, else ``alarm``, each a raw libc call whose failure is ignored.
Stopped by the runner's seccomp filter (all three: EPERM, no timer is armed) and by the
judge's read of the runner's caught signals (SIGALRM, beyond the harness's): signal_handler.
"""
import ctypes
import signal
import struct

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


signal.signal(signal.SIGALRM, _ahead)
_libc = ctypes.CDLL(None, use_errno=True)
_timer = ctypes.c_void_p(0)
_every = struct.pack("=qqqq", 0, 200_000, 0, 200_000)  # interval, first expiry: 200 us
if _libc.timer_create(1, None, ctypes.byref(_timer)) != 0 \
        or _libc.timer_settime(_timer, 0, _every, None) != 0:
    if _libc.setitimer(0, struct.pack("=qqqq", 0, 200, 0, 200), None) != 0:
        _libc.alarm(1)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    if _state["ready"]:
        _state["ready"] = False
        return
    n = out.numel()
    _add[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
