"""The one interface every sandbox backend implements.

A backend runs one command (the trusted judge) inside an isolated environment with this
fixed layout, whatever the mechanism:

=================  ======  =====================================================
path in sandbox    mode    holds
=================  ======  =====================================================
``/kg/harness``    ro      the ``sandbox`` package (trusted harness code)
``/kg/in``         ro      the candidate (and current best) sources
``/kg/out``        rw      the judge's secret file (consumed at start), result.json
``/tmp``           rw      tmpfs scratch, size-capped
=================  ======  =====================================================

It enforces :class:`grader.limits.Limits`, captures stdout/stderr with a cap, and reports
what happened in a :class:`SandboxOutcome`. It never interprets the result file: that is
the evaluation pipeline's job.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path

from grader.limits import LimitName, Limits

# The layout is part of the host<->judge contract: defined once, in the wire module.
from sandbox.wire import (
    HARNESS_MOUNT,
    IN_MOUNT,
    OUT_MOUNT,
    RESULT_NAME,
    SCRATCH_MOUNT,
    SECRET_NAME,
    Device,
)
from sandbox.wire import JUDGE_GID as SANDBOX_GID
from sandbox.wire import JUDGE_UID as SANDBOX_UID

__all__ = ["HARNESS_MOUNT", "IN_MOUNT", "OUT_MOUNT", "RESULT_NAME", "SANDBOX_GID", "SANDBOX_UID",
           "SCRATCH_MOUNT", "SECRET_NAME", "Device", "SandboxBackend", "SandboxOutcome",
           "SandboxSpec"]


@dataclass(frozen=True)
class SandboxSpec:
    """One sandboxed run: what to mount, what to run, under which limits."""

    in_dir: Path
    out_dir: Path
    argv: tuple[str, ...]
    limits: Limits
    device: Device = "cpu"
    gpu_ids: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    label: str = ""


@dataclass
class SandboxOutcome:
    """What the backend saw. ``limit_fired`` names the limit that ended the run, if any."""

    backend: str
    exit_code: int | None
    signal: int | None
    wall_s: float
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    oom_killed: bool = False
    pids_limited: bool = False
    output_truncated: bool = False
    limit_fired: LimitName | None = None
    enforcement: dict[str, str] = field(default_factory=dict)


class SandboxBackend(abc.ABC):
    """A way to run the judge in isolation. Implementations: ``bwrap``, ``docker``."""

    name: str = "abstract"

    @abc.abstractmethod
    def check_available(self, device: Device) -> None:
        """Raise :class:`grader.errors.SandboxUnavailableError` (with a fix) if unusable."""

    @abc.abstractmethod
    def python(self) -> str:
        """The interpreter path to use inside the sandbox."""

    @abc.abstractmethod
    def run(self, spec: SandboxSpec) -> SandboxOutcome:
        """Run ``spec.argv`` in a fresh sandbox; block until it ends or a limit fires."""

    def cleanup(self) -> int:
        """Remove anything this backend left behind; return how many items were removed."""
        return 0
