# ruff: noqa  (attack candidate: deliberately bad code)
"""Infinite loop at import: never reaches launch."""

while True:
    pass


def launch(x, y, out):
    out.copy_(x + y)
