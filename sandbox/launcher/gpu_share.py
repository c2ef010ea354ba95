"""Device buffers the judge shares with a runner of another uid: CUDA VMM, exported as an fd.

Legacy CUDA IPC (``cudaIpcGetMemHandle``, what torch's ``ForkingPickler`` sends) is refused
by the driver when the importing process has another uid ("mapping of buffer object
failed", seen on an H200 with driver 580): it cannot carry a buffer from the judge to a
runner that is its own principal. The driver's virtual-memory API can: the judge creates
the allocation with ``cuMemCreate``, exports it as a POSIX file descriptor and hands the
descriptor to the runner like the CPU path's sealed memfd (``pass_fds`` at spawn, or
``SCM_RIGHTS`` later); the runner imports, reserves an address range, maps and enables
access. Whoever holds the descriptor holds the buffer -- no ptrace, no ``pidfd_getfd``, no
uid check -- and nothing else of the judge's memory is reachable through it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from typing import Any

import torch

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0


class GpuShareError(RuntimeError):
    """The driver refused a step; the message names it and the CUresult (``cu_result``;
    ``nbytes``: the size asked for, where the step allocates). A ``cuMemCreate`` of 2
    (``CUDA_ERROR_OUT_OF_MEMORY``) is a full device (``sandbox.contract.device_memory``)."""

    def __init__(self, message: str, cu_result: int | None = None, nbytes: int | None = None):
        super().__init__(message)
        self.cu_result, self.nbytes = cu_result, nbytes


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", ctypes.c_ubyte * 8)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_lib: Any = None


def create_context() -> None:
    """This process's CUDA context, now (a one-element tensor and a synchronize): the
    judge has its runner and problem process make theirs beside its own at the compile
    stage's start, each of them ~0.15-0.3 s of driver work."""
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()


def _cuda() -> Any:
    global _lib
    if _lib is None:
        lib = ctypes.CDLL("libcuda.so.1")
        u64, sz, p = ctypes.c_ulonglong, ctypes.c_size_t, ctypes.c_void_p
        for name, args in {
            "cuMemGetAllocationGranularity": [p, p, ctypes.c_int],
            "cuMemCreate": [p, sz, p, u64],
            "cuMemExportToShareableHandle": [p, u64, ctypes.c_int, u64],
            "cuMemImportFromShareableHandle": [p, p, ctypes.c_int],
            "cuMemAddressReserve": [p, sz, sz, u64, u64],
            "cuMemMap": [u64, sz, sz, u64, u64],
            "cuMemSetAccess": [u64, sz, p, sz],
            "cuMemUnmap": [u64, sz],
            "cuMemAddressFree": [u64, sz],
            "cuMemRelease": [u64],
            "cuCtxGetCurrent": [p],
        }.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        _lib = lib
    return _lib


def _check(rc: int, what: str, nbytes: int | None = None) -> None:
    if rc != 0:
        raise GpuShareError(f"{what} failed with CUresult {rc}"
                            + (f" ({nbytes} bytes asked)" if nbytes is not None else ""), rc, nbytes)


def _prop(device: int) -> _AllocationProp:
    return _AllocationProp(CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                           _Location(CU_MEM_LOCATION_TYPE_DEVICE, device))


def _ready(device: int) -> Any:
    """The CUDA driver with torch's primary context current on this thread."""
    torch.cuda.synchronize(device)  # the runtime makes the primary context current here
    lib = _cuda()
    ctx = ctypes.c_void_p()
    _check(lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if not ctx.value:
        raise GpuShareError("no current CUDA context after torch initialised the device")
    return lib


def granularity(device: int = 0) -> int:
    lib = _ready(device)
    g = ctypes.c_size_t()
    prop = _prop(device)
    _check(lib.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(prop),
                                             CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity")
    return int(g.value)


class GpuBuffer:
    """One mapped VMM allocation of ``nbytes`` (rounded up to the granularity) as uint8."""

    def __init__(self, handle: int, nbytes: int, device: int, fd: int):
        lib = _cuda()
        self.handle, self.nbytes, self.device, self.fd = handle, nbytes, device, fd
        ptr = ctypes.c_ulonglong()
        _check(lib.cuMemAddressReserve(ctypes.byref(ptr), nbytes, 0, 0, 0), "cuMemAddressReserve")
        self.ptr = int(ptr.value)
        try:
            _check(lib.cuMemMap(self.ptr, nbytes, 0, handle, 0), "cuMemMap")
            desc = _AccessDesc(_Location(CU_MEM_LOCATION_TYPE_DEVICE, device),
                               CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            _check(lib.cuMemSetAccess(self.ptr, nbytes, ctypes.byref(desc), 1), "cuMemSetAccess")
        except GpuShareError:
            lib.cuMemAddressFree(self.ptr, nbytes)
            raise
        iface = {"shape": (nbytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3,
                 "strides": None}
        holder = type("_Mapped", (), {"__cuda_array_interface__": iface})()
        self.tensor: torch.Tensor = torch.as_tensor(holder, device=f"cuda:{device}")

    def close(self) -> None:
        """Unmap and release; the tensor must not be used afterwards."""
        lib = _cuda()
        torch.cuda.synchronize(self.device)
        lib.cuMemUnmap(self.ptr, self.nbytes)
        lib.cuMemAddressFree(self.ptr, self.nbytes)
        lib.cuMemRelease(self.handle)
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


def export_buffer(nbytes: int, device: int = 0) -> GpuBuffer:
    """Judge side: a new device buffer and a descriptor (``.fd``, not inheritable) for it."""
    lib = _ready(device)
    g = granularity(device)
    size = max(g, -(-nbytes // g) * g)
    prop = _prop(device)
    handle = ctypes.c_ulonglong()
    _check(lib.cuMemCreate(ctypes.byref(handle), size, ctypes.byref(prop), 0), "cuMemCreate", size)
    fd = ctypes.c_int(-1)
    rc = lib.cuMemExportToShareableHandle(ctypes.byref(fd), handle.value,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
    if rc != 0:
        lib.cuMemRelease(handle.value)
        _check(rc, "cuMemExportToShareableHandle")
    os.set_inheritable(fd.value, False)
    try:
        return GpuBuffer(int(handle.value), size, device, fd.value)
    except GpuShareError:
        os.close(fd.value)
        lib.cuMemRelease(handle.value)
        raise


def import_buffer(fd: int, nbytes: int, device: int = 0) -> GpuBuffer:
    """Runner side: map the buffer behind ``fd`` (exported by the judge) into this process."""
    lib = _ready(device)
    handle = ctypes.c_ulonglong()
    _check(lib.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd),
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
           "cuMemImportFromShareableHandle")
    try:
        return GpuBuffer(int(handle.value), nbytes, device, -1)
    except GpuShareError:
        lib.cuMemRelease(handle.value)
        raise
