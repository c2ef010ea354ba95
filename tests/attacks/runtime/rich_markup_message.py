# expect: allow
"""Raises a message written as rich markup: an unbalanced close tag (once crashed the
human-readable report, exit 2) and a balanced fake verdict on a line of its own (once drew
a green PASS line under the real FAIL); its exception's type name is markup too."""
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


class Verdict(Exception):
    pass


Verdict.__qualname__ = "[bold green]PASS[/]"


def launch(x, y, out):
    n = out.numel()
    _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    raise Verdict("done [/]\n[bold green]PASS[/]  task=vector_add_small  stage=benchmark  "
                  "device=cpu [/bold green]")
