"""The problem process's server: the task's own code, answering the judge (problem side).

Untrusted code lives in this process: the problem source (KernelBench module, GPU MODE
reference and helpers, or kgrader's own ``reference.py``) is executed here, by the
in-process implementations of :mod:`sandbox.problem.base` and :mod:`sandbox.problem.field`. The judge
decides the layout and tells this process, per request, where every tensor lives in the
buffer it handed over (a sealed memfd on the CPU, a VMM allocation on CUDA); this process
writes the inputs it generated and the outputs its reference computed there, and reads
back what the judge wrote for the checker. Nothing it answers is believed beyond what the
judge checks: shapes and dtypes against the judge's layout, text capped and cleaned.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import socket
import traceback
from typing import Any

import torch

from sandbox.contract import device_memory
from sandbox.contract.failure import StageFailure
from sandbox.contract.wire import TaskWire, _build
from sandbox.launcher import protocol
from sandbox.launcher.gpu_share import create_context
from sandbox.problem.base import Problem
from sandbox.problem.field import local_problem
from sandbox.problem.tensors import DTYPES, Slot

MAX_VERDICT = 1500  # a checker's message is data: capped here and again by the judge


class _Refused(Exception):
    """A request this process cannot serve (the judge's layout and the problem disagree)."""


class Server:
    def __init__(self, rfd: int, wfd: int, fd_sock: int, device: str):
        self.rfd, self.wfd, self.fd_sock = rfd, wfd, fd_sock
        self.device = device
        self.dev = "cuda" if device == "cuda" else "cpu"
        self.problem: Problem | None = None
        self.base: torch.Tensor | None = None
        self._keep: Any = None  # the mapping behind ``base``
        self._slots: dict[tuple[tuple[str, int], ...], list[Slot]] = {}

    # ---- requests -----------------------------------------------------------------------
    def setup(self, msg: dict[str, Any]) -> dict[str, Any]:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        task: TaskWire = _build(TaskWire, msg["task"], "task")
        self.problem = local_problem(task, str(msg["reference"]), self.dev, int(msg["init_seed"]))
        setup = self.problem.runner_setup()
        return {"returns": self.problem.returns, "init": setup.get("init"),
                "checker": bool(getattr(self.problem, "checker", None))}

    def device_op(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Create this process's CUDA context now (the judge asks at the compile stage's
        start, so that it is made beside the judge's and the runner's, not after them)."""
        if self.dev == "cuda":
            create_context()
        return {}

    def buffer(self, msg: dict[str, Any]) -> dict[str, Any]:
        with socket.socket(fileno=os.dup(self.fd_sock)) as sock:
            _, fds, _, _ = socket.recv_fds(sock, 1, 1)
        nbytes = int(msg["nbytes"])
        try:
            if self.dev == "cpu":
                self._keep = mmap.mmap(fds[0], nbytes)
                self.base = torch.frombuffer(self._keep, dtype=torch.uint8)
            else:
                from sandbox.launcher.gpu_share import import_buffer

                old, self._keep = self._keep, import_buffer(fds[0], nbytes)
                self.base = self._keep.tensor
                if old is not None:
                    old.close()
        finally:
            for fd in fds:
                os.close(fd)
        return {}

    def layout(self, msg: dict[str, Any]) -> dict[str, Any]:
        p = self._problem()
        dims = {str(k): int(v) for k, v in dict(msg["dims"]).items()}
        slots = p.layout(dims)
        self._slots[_key(dims)] = slots
        return {"tensors": [{"name": s.name, "role": s.role, "dtype": s.dtype,
                             "shape": list(s.shape)} for s in slots],
                "scratch": sorted(p.scratch), "call_data": p.call_data(slots),
                "notes": [str(n)[:MAX_VERDICT] for n in getattr(p, "notes", [])][:8]}

    def inputs(self, msg: dict[str, Any]) -> dict[str, Any]:
        p, slots = self._problem(), self._of(msg)
        made = p.inputs(slots, int(msg["seed"]))
        for w in msg["slots"]:
            self._put(w, made.get(str(w["name"])), exact=True)
        return {}

    def reference(self, msg: dict[str, Any]) -> dict[str, Any]:
        p, slots = self._problem(), self._of(msg)
        float64 = bool(msg.get("float64"))
        ins = {str(w["name"]): self._view(w).clone() for w in msg["inputs"]}
        outs = p.reference(slots, ins, float64=float64)
        for w in msg["outputs"]:
            self._put(w, outs.get(str(w["name"])), exact=not float64)
        return {}

    def inputs_reference(self, msg: dict[str, Any]) -> dict[str, Any]:
        """:meth:`inputs`, then :meth:`reference` on what was written (one round trip)."""
        p, slots = self._problem(), self._of(msg)
        made = p.inputs(slots, int(msg["seed"]))
        for w in msg["inputs"]:
            self._put(w, made.get(str(w["name"])), exact=True)
        ins = {str(w["name"]): self._view(w).clone() for w in msg["inputs"]}
        outs = p.reference(slots, ins)
        for w in msg["outputs"]:
            self._put(w, outs.get(str(w["name"])), exact=True)
        return {}

    def verify(self, msg: dict[str, Any]) -> dict[str, Any]:
        p, slots = self._problem(), self._of(msg)
        ins = {str(w["name"]): self._view(w).clone() for w in msg["inputs"]}
        outs = {str(w["name"]): self._view(w).clone() for w in msg["outputs"]}
        verdict = p.verify(slots, ins, outs)
        return {"verdict": None if verdict is None else str(verdict)[:MAX_VERDICT]}

    # ---- helpers ----------------------------------------------------------------------
    def _oom(self, e: BaseException, op: str) -> str:
        """One line for a device out of memory in request ``op``: asked, free, total."""
        free = total = None
        if self.dev == "cuda":
            with contextlib.suppress(Exception):  # a context the OOM left unusable: say less
                free, total = (int(x) for x in torch.cuda.mem_get_info())
        return device_memory.describe(f"the problem process ({op})", device_memory.asked_bytes(e),
                                      device_memory.Figures(free=free, total=total))

    def _problem(self) -> Problem:
        if self.problem is None:
            raise _Refused("no setup yet")
        return self.problem

    def _of(self, msg: dict[str, Any]) -> list[Slot]:
        slots = self._slots.get(_key({str(k): int(v) for k, v in dict(msg["dims"]).items()}))
        if slots is None:
            raise _Refused(f"no layout for dims {msg['dims']}")
        return slots

    def _view(self, w: dict[str, Any]) -> torch.Tensor:
        if self.base is None:
            raise _Refused("no buffer yet")
        dtype = DTYPES[str(w["dtype"])]
        shape = tuple(int(d) for d in w["shape"])
        count = 1
        for d in shape:
            count *= d
        off = int(w["offset"])
        end = off + count * dtype.itemsize
        if off < 0 or end > self.base.numel():
            raise _Refused(f"slot {w.get('name')!r} lies outside the buffer")
        return self.base[off:end].view(dtype).view(shape)

    def _put(self, w: dict[str, Any], t: Any, exact: bool) -> None:
        dst = self._view(w)
        name = w.get("name")
        if not isinstance(t, torch.Tensor):
            raise _Refused(f"the problem made no tensor {name!r}")
        if tuple(t.shape) != tuple(dst.shape) or (exact and t.dtype != dst.dtype):
            raise _Refused(f"the problem made {name!r} as {tuple(t.shape)} {t.dtype}, not "
                           f"{tuple(dst.shape)} {dst.dtype} as laid out")
        with torch.no_grad():
            dst.copy_(t.detach())
        if self.dev == "cuda":
            torch.cuda.synchronize()

    def serve(self) -> None:
        ops = {"setup": self.setup, "buffer": self.buffer, "layout": self.layout,
               "inputs": self.inputs, "reference": self.reference, "verify": self.verify,
               "inputs_reference": self.inputs_reference, "device": self.device_op}
        while True:
            try:
                msg = protocol.recv_json(self.rfd, None, 64 << 20)
            except protocol.ChannelClosed:
                return
            op = msg.get("op")
            if op == "exit":
                return
            fn = ops.get(str(op))
            try:
                if fn is None:
                    raise _Refused(f"unknown op {op!r}")
                reply = {"ok": True, **fn(msg)}
            except StageFailure as e:
                reply = _error(e.error.code, e.error.message)
            except BaseException as e:  # problem code may raise anything, SystemExit too
                if device_memory.is_device_oom(e):  # a full device: no traceback, the figures
                    reply = _error("device_out_of_memory", self._oom(e, str(op)))
                    protocol.send_json(self.wfd, reply)
                    continue
                tb = "".join(traceback.format_exception(e))[-1500:]
                reply = _error("reference_failed", f"{type(e).__name__}: {e}"[:1000] + "\n" + tb)
            protocol.send_json(self.wfd, reply)


def _key(dims: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(dims.items()))


def _error(code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message[:4000]}}


def serve(rfd: int, wfd: int, fd_sock: int, device: str) -> None:
    Server(rfd, wfd, fd_sock, device).serve()
