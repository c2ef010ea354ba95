"""A minimal stand-in for ``sandbox/launcher/launch.py``, for tests only, until the real one exists.

It checks the privilege contract every backend must give the sandbox's first process
(uid 0, effective = permitted = bounding = CAP_SETUID|CAP_SETGID|CAP_SYS_ADMIN,
``no_new_privs``), then does what the launcher does before the judge runs: clear the
ambient and inheritable sets, take the supplementary groups in ``KGRADER_DEVICE_GIDS``,
switch to uid/gid 65534 (which empties the permitted and effective sets) and exec its
arguments. It fails closed (exit 121) when the contract does not hold.

It travels as ``python3 -c SOURCE ARGV...``: the backends run argv unchanged, so nothing
needs to be installed in the sandbox.
"""

from __future__ import annotations

import os
from pathlib import Path

from grader.backends.base import SandboxBackend, SandboxOutcome, SandboxSpec

CONTRACT_BROKEN = 121
JUDGE_ARGV = ("python3", "-m", "sandbox.judge.main")
LAUNCH_ARGV = ("python3", "-m", "sandbox.launcher.launch")
REAL_LAUNCHER = Path(__file__).resolve().parents[2] / "sandbox" / "launch.py"

SOURCE = r"""
import ctypes, os, sys
EXPECTED = (1 << 6) | (1 << 7) | (1 << 21)  # CAP_SETGID, CAP_SETUID, CAP_SYS_ADMIN
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
caps = {k: int(status[k], 16) for k in ("CapEff", "CapPrm", "CapBnd")}
nnp = status["NoNewPrivs"].strip()
if os.getuid() != 0 or any(v != EXPECTED for v in caps.values()) or nnp != "1":
    print(f"standin-launch: contract broken: uid={os.getuid()} {caps} nnp={nnp}",
          file=sys.stderr, flush=True)
    sys.exit(121)
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(47, 4, 0, 0, 0) != 0:  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    sys.exit(121)
gids = [int(g) for g in os.environ.pop("KGRADER_DEVICE_GIDS", "").split(",") if g]
os.setgroups(gids)
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]
if libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()) != 0:  # all sets empty
    sys.exit(121)
argv = sys.argv[1:]
if argv[0] in ("python", "python3"):
    argv[0] = sys.executable
os.execv(argv[0], argv)
"""


def launch_argv(argv: tuple[str, ...]) -> tuple[str, ...]:
    """``argv`` as the sandbox's first process should run it.

    The real launcher's argv passes unchanged once ``sandbox/launcher/launch.py`` exists; anything
    else (the judge, a test snippet) runs under the stand-in.
    """
    if argv[:3] == LAUNCH_ARGV and REAL_LAUNCHER.is_file():
        return argv
    return ("python3", "-c", SOURCE, *argv)


class StandinLaunch(SandboxBackend):
    """A backend that runs every spec under :func:`launch_argv`; otherwise the inner one."""

    def __init__(self, inner: SandboxBackend) -> None:
        self.inner = inner
        self.name = inner.name

    def check_available(self, device: str) -> None:  # type: ignore[override]
        self.inner.check_available(device)  # type: ignore[arg-type]

    def python(self) -> str:
        return self.inner.python()

    def run(self, spec: SandboxSpec) -> SandboxOutcome:
        from dataclasses import replace

        return self.inner.run(replace(spec, argv=launch_argv(spec.argv)))

    def cleanup(self) -> int:
        return self.inner.cleanup()


def using_real_launcher() -> bool:
    return REAL_LAUNCHER.is_file() and os.environ.get("KGRADER_TEST_STANDIN") != "1"
