# ruff: noqa  (attack candidate: deliberately bad code)
"""Sleeps at import for PARAMS["seconds"]: keeps an evaluation in flight."""

import time

PARAMS = {"seconds": 600}
time.sleep(PARAMS["seconds"])


def launch(x, y, out):
    out.copy_(x + y)
