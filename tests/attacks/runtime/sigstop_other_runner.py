# expect: deny process-spawn
"""Starts a helper at import that walks /proc and SIGSTOPs (then SIGCONTs) every other process
it finds, over and over, while it computes the right answer itself.

With one uid for the judge and both runners this pauses the current best during its timed
calls (and the judge between them): an identical kernel was accepted over the current best
that way. Stopped by distinct runner uids, hidepid, the seccomp filter (signals reach only the
runner's own pid) and the judge's process count (``runner_spawned_process``).
"""
import subprocess
import sys

import torch
import triton
import triton.language as tl

_HELPER = r"""
import os, signal, time
me, runner = os.getpid(), os.getppid()
while True:
    targets = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (me, runner, 1)]
    for sig in (signal.SIGSTOP, signal.SIGCONT):
        for pid in targets:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        time.sleep(0.002)
"""
subprocess.Popen([sys.executable, "-c", _HELPER], start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
