# ruff: noqa  (attack candidate: deliberately bad code)
"""Memory bomb in launch: touches 32 MiB more of host memory per step, forever."""

hoard = []


def launch(x, y, out):
    while True:
        hoard.append(b"\x01" * (32 << 20))
