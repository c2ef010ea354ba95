"""A device that ran out of memory in the harness: one typed failure with its figures.

Operators share GPUs with other jobs. When another job fills the device, the judge's own
allocations (the shared VMM buffers, fresh inputs, the reference's outputs, the compare's
temporaries) and the problem process's (its reference, its checker) can fail: torch raises
``torch.OutOfMemoryError`` ("CUDA out of memory. Tried to allocate ..."), the driver's
``cuMemCreate`` returns ``CUDA_ERROR_OUT_OF_MEMORY`` (2), cuBLAS cannot create a handle.
None of it is the candidate's doing, nor a bug of the judge's: it is
``device_out_of_memory`` (infrastructure, retried), with one line that says what was
asked, what was free and who held the rest -- never a traceback, never ``judge_error``.

A candidate's runner that exceeds its own share stays the candidate's
``gpu_memory_limit`` (``sandbox.runner.main``): this module is for the harness's processes.

Standard library only: the judge, the problem process and the launcher import it (the
figures are gathered by whoever has a device: :func:`sandbox.judge.device.memory_figures`,
the problem process's own ``torch.cuda.mem_get_info``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sandbox.contract.failure import StageFailure
from sandbox.contract.wire import ErrorStage

CODE = "device_out_of_memory"
CUDA_ERROR_OUT_OF_MEMORY = 2  # CUresult and cudaError_t alike (cudaErrorMemoryAllocation)

# What the libraries say when the device has no memory left (never a shared-memory or
# register limit: Triton's OutOfResources is a kernel's own, and the candidate's).
_OOM_TEXT = re.compile(r"CUDA out of memory|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED|"
                       r"CUDNN_STATUS_ALLOC_FAILED|CUDA_ERROR_OUT_OF_MEMORY|"
                       r"cuMemCreate failed with CUresult 2\b|HIP out of memory|"
                       r"hipErrorOutOfMemory", re.IGNORECASE)
_ASKED = re.compile(r"Tried to allocate ([0-9.]+) ?([KMGT]?i?B)", re.IGNORECASE)
_UNITS = {"b": 1, "kib": 1 << 10, "kb": 1 << 10, "mib": 1 << 20, "mb": 1 << 20,
          "gib": 1 << 30, "gb": 1 << 30, "tib": 1 << 40, "tb": 1 << 40}
MAX_HOLDERS = 6  # processes named in the message (all of them stay in the detail, capped)


def is_device_oom(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is a device out of memory."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if type(e).__name__ == "OutOfMemoryError" and type(e).__module__.startswith("torch"):
            return True  # torch raises it for a device's allocator only (CUDA, ROCm)
        if getattr(e, "cu_result", None) == CUDA_ERROR_OUT_OF_MEMORY:
            return True  # sandbox.launcher.gpu_share.GpuShareError of an allocation
        if isinstance(e, RuntimeError | MemoryError) and _OOM_TEXT.search(str(e)[:4000]):
            return True
        e = e.__cause__ or e.__context__
    return False


def asked_bytes(exc: BaseException) -> int | None:
    """The allocation that failed, bytes, where the exception says (None: not known)."""
    nbytes = getattr(exc, "nbytes", None)
    if isinstance(nbytes, int) and nbytes > 0:
        return nbytes
    m = _ASKED.search(str(exc)[:4000])
    if m is None:
        return None
    unit = _UNITS.get(m.group(2).lower())
    return None if unit is None else int(float(m.group(1)) * unit)


@dataclass(frozen=True)
class Figures:
    """The device's memory when it ran out (bytes; None: not known). ``holders``: compute
    processes NVML shows and the bytes each holds (a sandbox sees only its own pid
    namespace's: the rest of the used memory is ``outside``, another job's)."""

    free: int | None = None
    total: int | None = None
    holders: dict[str, int] = field(default_factory=dict)

    @property
    def outside(self) -> int | None:
        """Used memory no process this sandbox can see holds (another job's), bytes."""
        if self.free is None or self.total is None:
            return None
        return max(0, self.total - self.free - sum(self.holders.values()))


def gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.2f} GiB"


def describe(where: str, asked: int | None, fig: Figures) -> str:
    """One line: where it happened, what was asked, what was free of what, who held it."""
    held = ", ".join(f"{who} {gib(n)}" for who, n in
                     sorted(fig.holders.items(), key=lambda kv: -kv[1])[:MAX_HOLDERS])
    parts = [f"the GPU ran out of memory in {where}: asked {gib(asked)}, "
             f"{gib(fig.free)} free of {gib(fig.total)}"]
    if held:
        parts.append(f"held by this sandbox's processes: {held}")
    if fig.holders and fig.outside:  # without its own processes' figures, nothing is known
        parts.append(f"{gib(fig.outside)} held outside this sandbox (another job on the GPU)")
    line = "; ".join(parts)
    return (line + ". The device is shared or full, not the candidate's fault: "
            "retry when it has room").replace("\n", " ")


def detail(where: str, asked: int | None, fig: Figures) -> dict[str, Any]:
    return {"where": where, "asked_bytes": asked, "free_bytes": fig.free,
            "total_bytes": fig.total, "outside_bytes": fig.outside if fig.holders else None,
            "holders": dict(sorted(fig.holders.items(), key=lambda kv: -kv[1])[:16])}


def failure(stage: ErrorStage, where: str, exc: BaseException, fig: Figures) -> StageFailure:
    """The typed failure for a device out of memory ``exc`` raised in ``where``."""
    asked = asked_bytes(exc)
    return StageFailure(stage, "device_out_of_memory", describe(where, asked, fig), origin="infrastructure",
                        detail=detail(where, asked, fig))
