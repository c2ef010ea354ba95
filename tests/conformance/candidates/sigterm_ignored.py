# ruff: noqa  (attack candidate: deliberately bad code)
"""Ignores SIGTERM, forks a SIGTERM-ignoring child in a new session, then spins at import."""

import os
import signal

signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    while True:
        pass
while True:
    pass


def launch(x, y, out):
    out.copy_(x + y)
