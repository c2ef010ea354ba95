# expect: allow
"""Raises a message of terminal control: an ANSI sequence that erases the line, a carriage
return to overwrite the real FAIL, NUL, backspaces and a bidi override, with a fake PASS
line drawn over it."""
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def launch(x, y, out):
    n = out.numel()
    _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    raise RuntimeError("\x1b[1A\x1b[2K\r\x1b[1;32mPASS\x1b[0m  task=vector_add_small  stage=benchmark"
                       "\x00\x08\x08\u202edrawkcab\u202c\x1b]0;title\x07")
