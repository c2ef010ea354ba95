"""One untrusted module in the judge's hands: its runner process and its shared buffer."""

from __future__ import annotations

import fcntl
import mmap
import os
import time
from typing import Any

import torch

from sandbox.proc import RunnerHandle
from sandbox.tensors import Slot, view
from sandbox.wire import BenchmarkWire

_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


class Side:
    """One runner (candidate, current best or a replicate) and the memory it writes into."""

    def __init__(self, path: str, entry: str, device: str, nbytes: int, bench: BenchmarkWire,
                 gpu_fraction: float | None, timeout: float, audit_ops: bool = False,
                 prefix: tuple[str, ...] = ()):
        # ``prefix``: a diagnostics tool wrapping the runner (sandbox/profiling.py).
        self.path = path
        self.device = device
        msg: dict[str, Any] = {"op": "setup", "cache": bench.cache, "flush_mib": bench.flush_mib,
                               "allow_tf32": bench.allow_tf32, "cuda_graph": bench.cuda_graph,
                               "audit_ops": audit_ops}
        if device == "cpu":
            # A sealed memfd: the runner can write the bytes but cannot shrink the file
            # under the judge's mapping (which would SIGBUS the judge).
            fd = os.memfd_create("kgrader-buffer", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
            os.ftruncate(fd, nbytes)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            self._mm = mmap.mmap(fd, nbytes)
            self.base = torch.frombuffer(self._mm, dtype=torch.uint8)
            os.set_inheritable(fd, True)
            self.runner = RunnerHandle(path, entry, device, pass_fds=(fd,), prefix=prefix)
            os.close(fd)
            self.runner.send({**msg, "memfd": fd, "nbytes": nbytes})
        else:
            self.base = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            self.runner = RunnerHandle(path, entry, device, prefix=prefix)
            self.runner.send_forking({**msg, "tensor": self.base, "gpu_fraction": gpu_fraction})
        self.bases = [self.base]
        setup = self.runner.receive(timeout, "compile_timeout")
        ready = time.monotonic() - self.runner.started
        self.startup = {"ready": ready}
        for key in ("import_s", "setup_s"):
            v = setup.get(key)
            if isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= ready:
                self.startup[key.removesuffix("_s")] = float(v)
        self.flush_bytes = int(setup.get("flush_bytes", 0))
        self.base_threads = -1

    def map_other(self, other: Side, timeout: float) -> None:
        """Let this runner also address ``other``'s buffer (CUDA only).

        Paired timing then swaps buffers between the sides every other pair, so where a
        buffer happens to sit in memory cannot favour one side. A runner that writes into
        the other side's buffer only makes that side fail its checks: the acceptance fails
        closed.
        """
        if self.device != "cuda":
            return
        self.runner.send_forking({"op": "map", "tensor": other.base})
        self.runner.receive(timeout, "compile_timeout")
        self.bases.append(other.base)

    def views(self, slots: list[Slot], buf: int = 0) -> dict[str, torch.Tensor]:
        base = self.bases[buf] if buf < len(self.bases) else self.base
        return {s.name: view(base, s) for s in slots}

    def close(self) -> None:
        self.runner.close()
