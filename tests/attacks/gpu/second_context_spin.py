"""GPU, scan off: computes honestly, then leaves a 3 ms spin kernel running in a second CUDA
context of its own (driver API through ctypes), which the runner's device synchronize does
not wait for. In paired timing the GPU would time-slice the current best's next call with
it, making the candidate look faster. The judge's idle probe between calls must see it."""

import ctypes

import torch
import triton
import triton.language as tl

_PTX = b"""
.version 7.0
.target sm_80
.address_size 64
.visible .entry spin(.param .u64 ns)
{
  .reg .u64 %t0, %t1, %d, %n;
  .reg .pred %p;
  ld.param.u64 %n, [ns];
  mov.u64 %t0, %globaltimer;
LOOP:
  mov.u64 %t1, %globaltimer;
  sub.u64 %d, %t1, %t0;
  setp.lt.u64 %p, %d, %n;
  @%p bra LOOP;
  ret;
}
"""

_cu = ctypes.CDLL("libcuda.so.1")
_ctx, _mod, _fn, _dev, _old = (ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p(),
                               ctypes.c_int(), ctypes.c_void_p())
torch.cuda.init()
_cu.cuInit(0)
_cu.cuDeviceGet(ctypes.byref(_dev), 0)
assert _cu.cuCtxCreate_v2(ctypes.byref(_ctx), 0, _dev) == 0, "no second context"
assert _cu.cuModuleLoadData(ctypes.byref(_mod), _PTX) == 0, "PTX refused"
assert _cu.cuModuleGetFunction(ctypes.byref(_fn), _mod, b"spin") == 0
_cu.cuCtxPopCurrent_v2(ctypes.byref(_old))
_NS = ctypes.c_uint64(3_000_000)
_ARGS = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(_NS), ctypes.c_void_p))


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def launch(x, y, out):
    n = out.numel()
    _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    _cu.cuCtxPushCurrent_v2(_ctx)
    _cu.cuLaunchKernel(_fn, 1, 1, 1, 1, 1, 1, 0, None, _ARGS, None)
    _cu.cuCtxPopCurrent_v2(ctypes.byref(_old))
