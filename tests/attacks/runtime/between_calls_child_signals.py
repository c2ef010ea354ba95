# expect: deny signals
"""Work between calls (``between_calls_setitimer.py``'s handler) on signals a helper process
sends: ``kill`` to the runner's own pid is allowed, also from a child. The handler is put on
SIGINT, which Python already catches (the kernel's mask of caught signals does not change),
and ``signal.getsignal`` is patched to hide it from the runner's own check. Stopped by the
judge: the helper is a process under the runner's uid (runner_spawned_process after a timed
call), and a handler that computes between calls spends the runner's CPU where the judge
counts it (work_between_calls).
"""
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


_runner = os.getpid()
if os.fork() == 0:  # the helper: SIGINT to the runner every 200 us, until it is gone
    try:
        while True:
            os.kill(_runner, signal.SIGINT)
            time.sleep(0.0002)
    finally:
        os._exit(0)
_harness_int = signal.getsignal(signal.SIGINT)
signal.signal(signal.SIGINT, _ahead)
_getsignal = signal.getsignal
signal.getsignal = lambda s: _harness_int if s == signal.SIGINT else _getsignal(s)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    if _state["ready"]:
        _state["ready"] = False
        return
    n = out.numel()
    _add[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
