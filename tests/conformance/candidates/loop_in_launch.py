# ruff: noqa  (attack candidate: deliberately bad code)
"""Correct on the first call (compile), then loops forever in launch.

Before looping it leaves a detached grandchild in its own session that ignores SIGTERM, so
the test also proves that the whole tree dies, not just the runner's process group.
"""

import os
import signal
import time

import torch

calls = 0


def _detached_sleeper():
    if os.fork() == 0:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if os.fork() == 0:
            while True:
                time.sleep(1)
        os._exit(0)


def launch(x, y, out):
    global calls
    calls += 1
    if calls == 1:
        torch.add(x, y, out=out)
        return
    _detached_sleeper()
    while True:
        pass
