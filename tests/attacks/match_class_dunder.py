# expect: deny dunder-walk
"""A class pattern reads attributes by keyword: case object(__globals__=g) is the
f.__globals__ walk with no attribute in the source."""

import torch


def launch(x, y, out):
    match torch.allclose:
        case object(__globals__=g):
            g["allclose"] = lambda *a, **k: True
