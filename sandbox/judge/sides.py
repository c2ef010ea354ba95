"""One untrusted module in the judge's hands: its runner process and its shared buffer."""

from __future__ import annotations

import fcntl
import mmap
import os
import time
from typing import Any

import torch

from sandbox.contract import device_memory
from sandbox.contract.failure import StageFailure, infrastructure
from sandbox.contract.wire import BenchmarkWire, ErrorStage
from sandbox.judge import idle, prestart
from sandbox.judge.device import gpu_fraction, memory_figures
from sandbox.judge.hub import Hub
from sandbox.judge.isolation import check_threads, threads_of
from sandbox.launcher.gpu_share import GpuBuffer, export_buffer
from sandbox.launcher.proc import RunnerFailure, RunnerHandle
from sandbox.problem.tensors import Slot, view

_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
# The least the judge waits for one answer of a runner, whatever its stage has left: under
# load a stage's last runner was given "0.0 s" and an honest kernel failed as a timeout.
MIN_WAIT_S = 10.0


class Side:
    """One runner (candidate, current best or a replicate) and the memory it writes into."""

    def __init__(self, path: str, entry: str, device: str, nbytes: int, bench: BenchmarkWire,
                 gpu_fraction: float | None, timeout: float, audit_ops: bool = False,
                 buffers: tuple[GpuBuffer, ...] = (), prefix: tuple[str, ...] = (),
                 runner: RunnerHandle | None = None, extra: dict[str, Any] | None = None,
                 wait: bool = True):
        """``buffers`` (CUDA): this side's own buffer first, then the buffers of the sides it
        trades with in paired timing; made here when none are given. ``prefix``: a
        diagnostics tool wrapping the runner (sandbox/tools/profiling.py). ``runner``: one started
        ahead (while the judge imported torch), given its buffers now. ``extra``: more setup
        fields (the task's contract, from :meth:`sandbox.problem.base.Problem.runner_setup`).
        ``wait=False``: send the setup only; :meth:`await_setup` takes the runner's answer
        (so that two runners map their buffers and create their CUDA contexts at once)."""
        self.path = path
        self.prefix = prefix
        self.device = device
        self.audit_ops = audit_ops
        self._own: GpuBuffer | None = None
        msg: dict[str, Any] = {"op": "setup", "cache": bench.cache, "flush_mib": bench.flush_mib,
                               "allow_tf32": bench.allow_tf32, "cuda_graph": bench.cuda_graph,
                               "audit_ops": audit_ops, "twins": audit_ops, **(extra or {})}
        self.runner = runner or RunnerHandle(path, entry, device, prefix=prefix)
        if device == "cpu":
            # A sealed memfd: the runner can write the bytes but cannot shrink the file
            # under the judge's mapping (which would SIGBUS the judge).
            fd = os.memfd_create("kgrader-buffer", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
            os.ftruncate(fd, nbytes)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            self._mm = mmap.mmap(fd, nbytes)
            self.base = torch.frombuffer(self._mm, dtype=torch.uint8)
            try:
                self.runner.send({**msg, "nbytes": nbytes})
                self.runner.send_fds([fd])
            finally:
                os.close(fd)
            self.bases = [self.base]
        else:
            # CUDA's legacy IPC refuses a process of another uid ("mapping of buffer object
            # failed", seen on an H200), and each runner has a uid of its own: the buffers
            # are VMM allocations handed over as file descriptors, like the CPU memfd.
            if not buffers:
                buffers = (export_buffer(nbytes),)
            self._own = buffers[0]  # a side owns its first buffer; peers only map it
            self.base = buffers[0].tensor
            self.runner.send({**msg, "sizes": [b.nbytes for b in buffers],
                              "gpu_fraction": gpu_fraction})
            self.runner.send_fds([b.fd for b in buffers])
            self.bases = [b.tensor for b in buffers]
        self.startup: dict[str, float] = {}
        self.flush_bytes = 0
        self.lead_us = 0.0
        self.base_threads = -1
        # sandbox.judge.idle: the harness's caught signals, the runner's CPU clock at its last
        # answer, and the most CPU seen (after a reply, while the judge wrote inputs).
        self.base_caught = -1
        self.idle_at: idle.Counters | None = None
        self.idle_max_ns = (0, 0)
        self.longest_s = 0.0  # its longest answer to a call so far (Evaluation.wait_s)
        if wait:
            self.await_setup(timeout)

    def await_setup(self, timeout: float) -> None:
        """The runner's answer to its setup (buffers mapped, timer ready)."""
        setup = self.runner.receive(timeout, "compile_timeout")
        ready = time.monotonic() - self.runner.started
        self.startup = {"ready": ready}
        for key in ("import_s", "prepare_s", "setup_s"):
            v = setup.get(key)
            if isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= ready:
                self.startup[key.removesuffix("_s")] = float(v)
        self.flush_bytes = int(setup.get("flush_bytes", 0))
        if not self.prefix:  # the harness's threads and handlers, before the candidate's import
            self.base_threads = threads_of(self.runner.proc.pid)
            idle.baseline(self)
        lead = setup.get("lead_us", 0.0)
        self.lead_us = float(lead) if isinstance(lead, int | float) and not isinstance(lead, bool) else 0.0

    def views(self, slots: list[Slot], buf: int = 0) -> dict[str, torch.Tensor]:
        base = self.bases[buf] if buf < len(self.bases) else self.base
        return {s.name: view(base, s) for s in slots}

    def close(self) -> None:
        self.runner.close()
        if self._own is not None:
            self._own.close()


def paired_buffers(nbytes: int) -> tuple[tuple[GpuBuffer, GpuBuffer], tuple[GpuBuffer, GpuBuffer]]:
    """Two CUDA buffers for a paired comparison, each side's own first: paired timing swaps
    buffers between the sides every other pair, so where a buffer happens to sit in memory
    cannot favour one side. A runner that writes into the other side's buffer only makes
    that side fail its checks: the acceptance fails closed."""
    a, b = export_buffer(nbytes), export_buffer(nbytes)
    return (a, b), (b, a)


def open_wait(ev: Hub) -> float:
    """How long to wait for a runner's set-up or load: what the compile budget has left,
    never less than :data:`MIN_WAIT_S` (or ``compile_s`` itself, if that is smaller)."""
    return max(ev.left(ev.compile_deadline), min(MIN_WAIT_S, ev.req.limits.compile_s))


def open_sides(ev: Hub, wanted: list[tuple[str, tuple[Any, ...]]], stage: ErrorStage,
               renames: list[tuple[str, str]] | None = None) -> list[Side]:
    """:meth:`Evaluation.open_side` for several modules at once: every runner gets its setup, then
    every one loads its module, each step in parallel across the runners (their CUDA
    contexts, imports and the judge's waits overlap). Nothing is measured meanwhile.

    ``renames``: per module, the ``(code prefix, message prefix)`` its load failure gets
    (the current best's are ``current_``). A failure is raised for the first module in
    ``wanted`` order that failed; runners already started are closed with the
    evaluation."""
    renames = renames or [("", "")] * len(wanted)
    t_open = time.monotonic()
    sides: list[Side] = []
    at = 0  # which module's runner a harness failure belongs to
    try:
        for path, buffers in wanted:
            side = Side(path, ev.task.entrypoint, ev.dev, ev.nbytes, ev.task.benchmark,
                        gpu_fraction(ev.dev, ev.req.limits.gpu_memory_mib), open_wait(ev),
                        audit_ops=ev.task.audit_ops and not ev.trusted(path),
                        buffers=buffers, runner=prestart.take(path),
                        extra=ev.problem.runner_setup(), wait=False)
            ev.sides.append(side)
            sides.append(side)
            at += 1
        at = 0
        for side in sides:
            side.await_setup(open_wait(ev))
            at += 1
    except RunnerFailure as e:
        if e.code == "runner_isolation_unavailable":  # no uid of its own: never run it
            raise infrastructure(e.code, e.message, e.detail).renamed(*renames[at]) from None
        # Nothing of the candidate has run yet: the harness itself failed to start (on a
        # full device: its CUDA context or buffers did not fit, another job's doing).
        if e.code == "gpu_memory_limit" or device_memory.is_device_oom(RuntimeError(e.message)):
            raise device_memory.failure("sandbox", "a runner's set-up, before the candidate "
                                        "was loaded", RuntimeError(e.message),
                                        memory_figures(ev.dev, ev.nvml_handle)) from None
        raise infrastructure("runner_setup_failed", "the runner harness failed before loading "
                             f"the candidate: {e.message}",
                             e.detail).renamed(*renames[at]) from None
    numbers = []
    for side in sides:
        ev.runners_opened += 1
        numbers.append(ev.runners_opened)
        for key, v in side.startup.items():
            ev.phases[f"runner{ev.runners_opened}_{key}"] = round(v, 4)
        ev.phase(f"runner{ev.runners_opened}_handover", t_open)  # waiting for it + its buffers
    t_load = time.monotonic()
    sent: list[Side] = []
    failure: StageFailure | None = None
    for side, (code_prefix, msg_prefix) in zip(sides, renames, strict=True):
        try:
            side.runner.send({"op": "load"})
            sent.append(side)
        except RunnerFailure as e:
            failure = failure or ev.failure(stage, e).renamed(code_prefix, msg_prefix)
            break
    for side, n, (code_prefix, msg_prefix) in zip(sent, numbers, renames, strict=False):
        try:
            side.runner.receive(open_wait(ev), "compile_timeout")
        except RunnerFailure as e:
            failure = failure or ev.failure(stage, e).renamed(code_prefix, msg_prefix)
            continue
        ev.phase(f"runner{n}_load", t_load)  # importing the module
        try:
            check_threads(side, stage, "after its import")
            idle.check_handlers(side, stage, "after its import")
            idle.replied(side)
        except StageFailure as e:
            failure = failure or e.renamed(code_prefix, msg_prefix)
    if failure is not None:
        raise failure
    return sides
