"""The ``testbox`` backend: bubblewrap namespaces (the library's building blocks), CPU
only, no warm start; its own lifecycle methods know whether this process ran one and
reclaim its cgroups through the shared cgroup rules."""

from __future__ import annotations

import threading

from grader.backends.base import Capabilities, Device, Reclaimed, SandboxOutcome, SandboxSpec
from grader.backends.bwrap.backend import BwrapBackend
from grader.backends.cgroups import reclaim_stale
from grader.backends.owner import owner_alive, owner_gone
from grader.backends.registry import sandbox_backend
from grader.errors import SandboxUnavailableError

_runs_lock = threading.Lock()
RUNS: list[str] = []  # the labels of the sandboxes this process ran


@sandbox_backend("testbox")
class TestboxBackend(BwrapBackend):
    """bwrap's command line and supervisor under another name; CPU only."""

    capabilities = Capabilities(warm_start=False, daemon=False, devices=("cpu",),
                                leftovers="cgroups")

    def check_available(self, device: Device) -> None:
        if device != "cpu":
            raise SandboxUnavailableError(f"the testbox backend runs on cpu only, not {device}")
        super().check_available(device)

    def run(self, spec: SandboxSpec) -> SandboxOutcome:
        with _runs_lock:
            RUNS.append(spec.label)
        return super().run(spec)

    @classmethod
    def kill_own(cls, owner: str) -> int:
        if not RUNS:
            return 0  # this process ran none
        return len(reclaim_stale(lambda o: o != owner and owner_alive(o)))

    @classmethod
    def remove_own(cls, owner: str) -> int:
        return cls.kill_own(owner)

    @classmethod
    def reclaim(cls, *, include_live: bool = False) -> Reclaimed:
        return Reclaimed(removed=tuple(reclaim_stale(owner_alive, include_live=include_live)))

    @classmethod
    def sweep(cls) -> Reclaimed:
        return Reclaimed(removed=tuple(reclaim_stale(lambda o: not owner_gone(o))))
