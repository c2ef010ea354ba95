"""What the runner's harness does with Triton before any candidate code: build its C helper
and prime its compiler (both in the runner's own process, before the dispositions and the
thread count the candidate is checked against are taken)."""

from __future__ import annotations

import importlib
import os
import time


def prepare_triton(device: str) -> float:
    """Harness code, before any candidate: import Triton and build its C helper module
    (``cuda_utils``, a compiler run of ~0.3 s) into this runner's private cache, so that the
    candidate's first launch does not wait for it. The helper is built and loaded, never
    called: no CUDA call, so a runner prepared ahead of its measurement gate still touches
    no device. On the CPU (the interpreter) only the import: the twin boundary's install at
    the runner's setup imported it (0.12-0.16 s of a warm CPU evaluation's 1.5 s, measured
    on a 2-core host), and a runner started ahead (a warm pool's, or beside the judge's own
    start) pays it before it is taken. Without Triton nothing happens. Seconds spent."""
    t0 = time.monotonic()
    if device != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        try:
            import triton.language
            import triton.runtime.interpreter
        except Exception:  # no Triton: a torch-only task
            pass
        return time.monotonic() - t0
    try:
        import triton.language  # noqa: F401
        from triton.backends.nvidia.driver import CudaUtils

        CudaUtils()
    except Exception:  # an older or newer Triton, no compiler: the first launch builds it
        pass
    prime_compiler()
    triton_key()
    return time.monotonic() - t0


def triton_key() -> None:
    """Triton's own cache key (a hash of its sources and of ``libtriton.so``, ~500 MB with
    Triton 3.9: 0.45 s on a 2-core VM), which Triton computes once per process, at the
    first kernel's compile or cache lookup: computed here, by the harness, it is off the
    candidate's first call. No device is touched. Nothing when Triton has no such API."""
    for where in ("triton.runtime.cache", "triton.compiler.compiler"):
        try:
            importlib.import_module(where).triton_key()
            return
        except Exception:
            continue


def prime_backend() -> None:
    """Once this runner may use the device (its CUDA context made, before the setup):
    Triton's target and its backend's hash (``ptxas --version``), which the first kernel's
    cache lookup would otherwise ask for. Nothing when Triton has no such API."""
    try:
        from triton.compiler.compiler import make_backend
        from triton.runtime.driver import driver

        make_backend(driver.active.get_current_target()).hash()
    except Exception:
        pass


def prime_compiler() -> None:
    """Run Triton's MLIR pass manager once, empty, on an empty module (~10 ms, no device).

    Its first run registers LLVM's signal handlers in this process (SIGHUP, SIGQUIT,
    SIGUSR1, SIGUSR2, SIGTERM, SIGXCPU, SIGXFSZ, SIGSYS: LLVM's crash and interrupt
    handlers, seen with Triton 3.6 and 3.9). Done here, by the harness, they are part of
    the dispositions taken before the candidate's import (sandbox.runner.handlers and the
    judge's own SigCgt baseline); otherwise an honest kernel's first compile on a GPU
    would add them in its call and fail ``signal_handler``. Nothing when Triton has no
    such API: the candidate's compile would then be refused, never let through."""
    try:
        from triton._C.libtriton import ir

        ctx = ir.context()
        ir.load_dialects(ctx)
        module = ir.builder(ctx).create_module()
        pm = ir.pass_manager(ctx)
        try:
            pm.run(module, "kgrader-prime")
        except TypeError:  # an older Triton: run(module)
            pm.run(module)
    except Exception:
        pass
