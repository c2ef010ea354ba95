"""Runners started ahead: while the judge imports torch, so do they.

The judge starts the runners a plain evaluation will need (the candidate; the current best
when there is one) right after reading its request and before importing torch; each
imports torch and Triton (and, on CUDA, makes its context) in parallel with the judge and
then waits for its buffers over its unix socket. Each is still used once, for one module,
under its own uid: nothing is shared between candidates. Standard library only (it runs
before torch is imported).
"""

from __future__ import annotations

import contextlib

from sandbox.proc import RunnerFailure, RunnerHandle
from sandbox.wire import JudgeRequest

_ready: dict[str, RunnerHandle] = {}


def start(req: JudgeRequest) -> None:
    """Start the runners of a plain evaluation; a failure here only means no head start."""
    if req.mode != "evaluate" or req.task is None or req.sanitize is not None:
        return
    for path in (req.candidate, req.current):
        if path and path not in _ready:
            with contextlib.suppress(RunnerFailure, OSError):
                _ready[path] = RunnerHandle(path, req.task.entrypoint,
                                            "cuda" if req.device == "cuda" else "cpu")


def take(path: str) -> RunnerHandle | None:
    """The runner started ahead for ``path``, once; None when there is none."""
    return _ready.pop(path, None)


def pending() -> dict[int, int]:
    """pid -> uid of runners started but not yet taken (expected processes, not extra)."""
    return {h.proc.pid: h.uid for h in _ready.values()}


def close_all() -> None:
    for path in list(_ready):
        _ready.pop(path).close()
