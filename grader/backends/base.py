"""The one interface every sandbox backend implements.

A backend runs one command (``SandboxSpec.argv``, unchanged: in production
``python3 -m sandbox.launcher.launch``) inside an isolated environment with this fixed layout,
whatever the mechanism:

=================  ======  =====================================================
path in sandbox    mode    holds
=================  ======  =====================================================
``/kg/harness``    ro      the ``sandbox`` package (trusted harness code)
``/kg/in``         ro      the candidate (and current best) sources
``/kg/out``        rw      uid 65534, mode 0700: the judge's secret file (consumed at
                           start), result.json; no other uid may write there
``/tmp``           rw      tmpfs scratch, mode 1777, capped in size and inodes
``/dev/shm``       rw      tmpfs, mode 1777, noexec, capped in size and inodes
=================  ======  =====================================================

Privilege contract (the same on every backend): the sandbox's first process runs as uid
0 *inside* the sandbox with exactly :data:`LAUNCH_CAPS` in its effective, permitted and
bounding sets, ``no_new_privs`` set, in its own pid, mount, ipc, uts and network
namespaces (loopback only). That launcher (``sandbox/launcher/launch.py``) drops to the judge's
uid 65534 and execs the judge; the judge starts each runner under its own uid. Device
nodes of the GPUs given are usable by unprivileged uids: world read-write, or through the
supplementary groups listed in ``KGRADER_DEVICE_GIDS`` (comma-separated) for the launcher
to hand on. Memory, pids, wall (and on docker CPU) limits cover the whole process tree
whatever uids it switches to.

It enforces :class:`grader.limits.Limits`, drains stdout/stderr with a cap
(:mod:`grader.backends.output`), classifies the end of the run in one order
(:mod:`grader.backends.classify`) and reports what it enforced and how in a typed
:class:`grader.backends.enforcement.Enforcement`. It never interprets the result file:
that is the evaluation pipeline's job.
"""

from __future__ import annotations

import abc
import os
import platform
import threading
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from grader.backends.enforcement import Enforcement
from grader.errors import UsageError
from grader.limits import LimitName, Limits

# The layout is part of the host<->judge contract: defined once, in the wire module.
from sandbox.contract.wire import (
    HARNESS_MOUNT,
    IN_MOUNT,
    OUT_MOUNT,
    RESULT_NAME,
    SCRATCH_MOUNT,
    SECRET_NAME,
    Device,
)
from sandbox.contract.wire import JUDGE_GID as SANDBOX_GID
from sandbox.contract.wire import JUDGE_UID as SANDBOX_UID

if TYPE_CHECKING:
    from grader.backends.gate import Turn

SHM_MOUNT = "/dev/shm"
# Capabilities of the launcher, the sandbox's first process (uid 0 inside the sandbox):
# change uids for the judge and the runners, and remount /proc with hidepid.
LAUNCH_CAPS = ("SETUID", "SETGID", "SYS_ADMIN")

__all__ = ["HARNESS_MOUNT", "IN_MOUNT", "LAUNCH_CAPS", "OUT_MOUNT", "RESULT_NAME", "SANDBOX_GID",
           "SANDBOX_UID", "SCRATCH_MOUNT", "SECRET_NAME", "SHM_MOUNT", "Capabilities", "Device",
           "EndedBy", "Enforcement", "Reclaimed", "SandboxBackend", "SandboxOutcome",
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
    # A turn at the device's measurement gate (grader.backends.gate): the judge waits at
    # it before touching the device, and the wall limit counts from the grant.
    gate: Turn | None = None
    # Set when the evaluation is cancelled (a service job): the backend kills the sandbox.
    cancel: threading.Event | None = None


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
    enforcement: Enforcement | None = None
    memory_limit_hits: int = 0  # bwrap's cgroup: usage reached memory_mib this often
    # The kernel counts every OOM kill of the sandbox's processes (a memory cgroup), so
    # ``oom_killed`` False means none happened; False where only a watchdog samples RSS.
    oom_counted: bool = False
    # The sandbox's cgroup vanished before the backend ended the run: removed from outside
    # the sandbox (only root on the host can), killing what was in it.
    cgroup_lost: bool = False
    # Compute processes on the sandbox's GPUs that were not the sandbox's ("pid N (name)"),
    # seen by the host's NVML (grader.backends.gpu_watch); ``device_watched``: it looked.
    device_shared_by: tuple[str, ...] = ()
    device_watched: bool = False


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do: the generic layer asks these instead of testing its name."""

    # It starts a sandbox apart from its turn at the device's gate (its supervisor waits on
    # the turn after the start), so a warm pool (grader.pool) can start one ahead.
    warm_start: bool = False
    # It needs a daemon (which may be down): `kgrader sandbox cleanup` reports its state,
    # and ``--no-docker`` (no daemon) skips it.
    daemon: bool = False
    # The devices it can pass into a sandbox.
    devices: tuple[Device, ...] = ("cpu",)
    # What its leftovers are, as the cleanup report counts them.
    leftovers: Literal["containers", "cgroups"] = "cgroups"


@dataclass(frozen=True)
class Reclaimed:
    """What one backend's :meth:`SandboxBackend.reclaim` or ``sweep`` removed and kept."""

    removed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    # A daemon backend's line for the report (``checked``, ``unavailable: why``, ...);
    # ``None``: nothing to say (a host-local backend always looks).
    state: str | None = None


@dataclass(frozen=True)
class EndedBy:
    """Why a sandbox that left no record ended, as only its backend can tell from its
    outcome (the report's error: stage ``sandbox``, origin ``infrastructure``)."""

    code: str  # a code of sandbox.contract.codes
    message: str


class SandboxBackend(abc.ABC):
    """A way to run the judge in isolation, and everything about its sandboxes' lifecycle.

    Implementations are registered by name (:mod:`grader.backends.registry`). The class
    methods need no instance: the signal path, the sweep and ``kgrader sandbox cleanup``
    call them without building a client or checking availability. A class method is
    called only on a backend whose module is loaded where that is said (the signal path:
    a backend never imported in this process started no sandbox here).
    """

    name: str = "abstract"  # set by @sandbox_backend (grader.backends.registry)
    capabilities: ClassVar[Capabilities] = Capabilities()

    @abc.abstractmethod
    def check_available(self, device: Device) -> None:
        """Raise :class:`grader.errors.SandboxUnavailableError` (with a fix) if unusable."""

    @abc.abstractmethod
    def python(self) -> str:
        """The interpreter path to use inside the sandbox."""

    @abc.abstractmethod
    def run(self, spec: SandboxSpec) -> SandboxOutcome:
        """Run ``spec.argv`` in a fresh sandbox; block until it ends or a limit fires."""

    @classmethod
    def kill_own(cls, owner: str) -> int:
        """SIGKILL every sandbox of ``owner`` (this process) now; how many were hit.

        The signal path (:mod:`grader.backends.stop`), every 0.2 s while stopping: fast,
        never raises for one item. Descendant processes are killed by the caller."""
        return 0

    @classmethod
    def remove_own(cls, owner: str) -> int:
        """Remove what is still ``owner``'s (this process, just before it exits); how many."""
        return 0

    @classmethod
    def reclaim(cls, *, include_live: bool = False) -> Reclaimed:
        """``kgrader sandbox cleanup``: remove the leftovers whose owner no longer runs on
        this host (all of them with ``include_live``). Never raises for one item; a daemon
        that cannot be reached is the result's ``state``."""
        return Reclaimed()

    @classmethod
    def sweep(cls) -> Reclaimed:
        """The cheap sweep every grading command runs when it starts: only what provably
        has no live owner; milliseconds (slow work goes to a background thread)."""
        return Reclaimed()

    @classmethod
    def fingerprint(cls, device: Device) -> dict[str, Any]:
        """What the peaks cache keys on besides the hardware (:mod:`grader.measure.peaks`):
        by default the host's interpreter and packages, which a host-interpreter sandbox runs."""
        return {"python": platform.python_version(), "torch": _version("torch"),
                "triton": _version("triton")}

    @classmethod
    def ended_by(cls, outcome: SandboxOutcome) -> EndedBy | None:
        """Why a run of this backend that left no record ended, when its outcome shows a
        cause outside the sandbox that only this backend knows; else ``None``."""
        return None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def prepare_out_dir(out_dir: Path) -> None:
    """Make ``/kg/out``'s host side a plain directory of uid 65534, mode 0700.

    Only the judge's uid may then write there: runners (other uids) cannot, which is what
    bounds the output folder. Without root we cannot chown; the folder is then opened to
    all and the evaluation folder's parents must keep others out.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    if out_dir.is_symlink() or not out_dir.is_dir():
        raise UsageError(f"out_dir is not a plain directory: {out_dir}", code="bad_out_dir")
    if os.geteuid() == 0:
        os.chown(out_dir, SANDBOX_UID, SANDBOX_GID, follow_symlinks=False)
        out_dir.chmod(0o700)
    else:
        out_dir.chmod(0o777)
