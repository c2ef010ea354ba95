"""Hands its kernel a tuple holding an object with a ``data_ptr`` (not a tensor) beside the
tensors, hoping the harness passes the container through untouched."""
import triton
import triton.language as tl


@triton.jit
def _add(xy, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(xy[0] + offs, mask=m) + tl.load(xy[1] + offs, mask=m), mask=m)


class _Ptr:
    def __init__(self, t):
        self.t = t
        self.dtype = t.dtype

    def data_ptr(self):
        return self.t.data_ptr()


def launch(x, y, out):
    _add[(triton.cdiv(out.numel(), 1024),)]((_Ptr(x), y), out, out.numel(), BLOCK=1024)
