# expect: deny signals
"""Computes the next call's answer between calls, in a SIGALRM handler of an interval timer
armed at import (``signal.setitimer``): the handler runs in the runner's own main thread
while it waits for the next request, finds the harness's frame (its buffers and the last
call's layout), and when the judge has written fresh inputs and poisoned the outputs it
adds them with torch; the timed call then returns at once. Where the handler was too late
the call launches an honest kernel, so every answer is right and only the timing lies.
Stopped by the runner's seccomp filter (``setitimer`` with a new value: EPERM); and were a
handler to run between calls, by the judge's proof that the runner stayed idle between its
reply and the next request, and by its refusal of signal handlers the harness did not have.
"""
import signal

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
signal.setitimer(signal.ITIMER_REAL, 0.0002, 0.0002)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    if _state["ready"]:
        _state["ready"] = False
        return
    n = out.numel()
    _add[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
