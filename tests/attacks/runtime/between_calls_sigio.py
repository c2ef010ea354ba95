# expect: deny signals
"""Work between calls (``between_calls_setitimer.py``'s handler) on an I/O signal: a helper
process writes a byte into a pipe every 200 us, and the pipe's read end is the runner's with
``O_ASYNC`` (``F_SETOWN``, ``F_SETFL``; ``FIOASYNC`` as a fallback), so the kernel sends the
runner SIGIO on every write, also while it waits for the next request. Stopped by the
runner's seccomp filter (``F_SETOWN``, ``O_ASYNC`` and ``FIOASYNC``: EPERM), by the judge's
read of the runner's caught signals (SIGIO: signal_handler), and the helper by the process
count after a timed call.
"""
import ctypes
import fcntl
import os
import signal
import time

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


def _on_io(signum, frame):
    try:
        os.read(_r, 4096)
    except OSError:
        pass
    _ahead(signum, frame)


_r, _w = os.pipe()
if os.fork() == 0:  # the helper: a byte every 200 us, until the runner is gone
    os.close(_r)
    try:
        while True:
            os.write(_w, b"x")
            time.sleep(0.0002)
    finally:
        os._exit(0)
os.close(_w)
os.set_blocking(_r, False)
signal.signal(signal.SIGIO, _on_io)
try:
    fcntl.fcntl(_r, fcntl.F_SETOWN, os.getpid())
    fcntl.fcntl(_r, fcntl.F_SETFL, fcntl.fcntl(_r, fcntl.F_GETFL) | os.O_ASYNC)
except OSError:
    ctypes.CDLL(None).ioctl(_r, 0x5452, ctypes.byref(ctypes.c_int(1)))  # FIOASYNC


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    if _state["ready"]:
        _state["ready"] = False
        return
    n = out.numel()
    _add[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
