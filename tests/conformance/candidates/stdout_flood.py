# ruff: noqa  (attack candidate: deliberately bad code)
"""Writes 1 GiB to stdout at import (1 MiB chunks), then computes the right answer."""

import sys

import torch

_chunk = b"A" * (1 << 20)
for _ in range(1024):
    sys.stdout.buffer.write(_chunk)
sys.stdout.buffer.flush()


def launch(x, y, out):
    torch.add(x, y, out=out)
