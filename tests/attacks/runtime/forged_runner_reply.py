# expect: deny os-module
"""Writes the runner's answer to its load request itself, at import, with a thread count
that is not a number: once, the judge's int() raised and the candidate's forgery was
recorded as the judge's own bug (an infrastructure error)."""
import json
import os
import struct
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def _forge() -> None:
    fd = int(sys.argv[sys.argv.index("--write-fd") + 1])
    body = b"J" + json.dumps({"ok": True, "threads": "many \ud800"}).encode()
    os.write(fd, struct.pack(">I", len(body)) + body)


_forge()


def launch(x, y, out):
    n = out.numel()
    _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
