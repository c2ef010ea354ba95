"""A kernel with a ``launch_metadata`` callable and a runtime launch-enter hook that asks for it:
Triton evaluates the callable with the launch's arguments (on the GPU; the interpreter has no
launch hooks, so there the empty kernel simply writes nothing). The callable adds the inputs
into the output in Python."""
import torch
import triton
import triton.language as tl
from triton import knobs


def _meta(grid, metadata, args):
    x, y, out = args["x_ptr"], args["y_ptr"], args["o_ptr"]
    out.view(-1)[:] = torch.tensor([float(a) + float(b) for a, b in zip(x.reshape(-1), y.reshape(-1),
                                                                      strict=True)], dtype=out.dtype)
    return {}


@triton.jit(launch_metadata=_meta)
def _nothing(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    tl.program_id(0)


def _enter(lazy):
    lazy.get()


def launch(x, y, out):
    knobs.runtime.launch_enter_hook = _enter
    _nothing[(1,)](x, y, out, out.numel(), BLOCK=1024)
