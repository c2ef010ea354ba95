"""The kernel steps the bwrap backend takes in the child, as root, before it execs bwrap.

One step per kernel operation, in order, each failing closed (an exception here makes
``Popen`` raise, and no sandbox starts):

1. join the evaluation's cgroup (memory, pids), so the whole tree is inside it;
2. rlimits: no core files, ``RLIMIT_FSIZE``;
3. a new network namespace with only ``lo``, brought up here (bwrap would need
   ``CAP_NET_ADMIN`` to do it, which we do not want left in the bounding set);
4. a new mount namespace, made recursively private, so nothing below reaches the host;
5. in it, one tmpfs on each scratch mount point with ``size=`` *and* ``nr_inodes=``
   (bwrap's own ``--tmpfs`` has ``--size`` but no inode cap). The mounts exist only in
   this namespace: when the sandbox's last process dies they disappear with it, even if
   the host process was killed with ``SIGKILL``;
6. ``no_new_privs``, and a bounding set of exactly :data:`LAUNCH_CAPS`: bwrap keeps the
   bounding set it is started with when it runs as real root without a user namespace
   (a user namespace is out: it maps one uid, and the launcher must switch to others).

Everything the child needs (libc, numbers, byte strings) is prepared in the parent: the
child of a threaded process must not import or allocate much before ``exec``.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import resource
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.backends.base import LAUNCH_CAPS

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
CAP_NUMBERS = {"SETGID": 6, "SETUID": 7, "NET_ADMIN": 12, "SYS_ADMIN": 21}

_libc = ctypes.CDLL("libc.so.6", use_errno=True)  # glibc; find_library forks ldconfig


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _cap_last_cap() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 63


@dataclass(frozen=True)
class ScratchSpec:
    """One tmpfs to mount at ``host_dir`` (a mount point only this sandbox sees)."""

    host_dir: Path
    size_bytes: int
    inodes: int
    noexec: bool

    @property
    def options(self) -> str:
        return f"size={self.size_bytes},nr_inodes={self.inodes},mode=1777"

    @property
    def flags(self) -> int:
        return MS_NOSUID | MS_NODEV | (MS_NOEXEC if self.noexec else 0)

    def describe(self) -> str:
        return ",".join(["rw", "nosuid", "nodev", *(["noexec"] if self.noexec else [])])


class HostSteps:
    """The ``preexec_fn`` of the bwrap backend (see the module docstring)."""

    def __init__(self, *, attach: Callable[[int], None] | None, file_size: int,
                 scratch: tuple[ScratchSpec, ...]) -> None:
        self.attach = attach
        self.file_size = file_size
        self.mounts = [(str(s.host_dir).encode(), s.flags, s.options.encode()) for s in scratch]
        keep = {CAP_NUMBERS[c] for c in LAUNCH_CAPS}
        self.drop = [c for c in range(_cap_last_cap() + 1) if c not in keep]
        self.ifreq_name = b"lo"

    def __call__(self) -> None:
        if self.attach is not None:
            self.attach(os.getpid())
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.file_size, self.file_size))
        self._network()
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
        for target, flags, options in self.mounts:
            _check(_libc.mount(b"kgrader-scratch", target, b"tmpfs", flags, options),
                   "mount scratch tmpfs")
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        for cap in self.drop:
            _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")

    def _network(self) -> None:
        _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            req = fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, struct.pack("16sH14x", self.ifreq_name, 0))
            flags = struct.unpack("16sH14x", req)[1]
            fcntl.ioctl(s.fileno(), SIOCSIFFLAGS,
                        struct.pack("16sH14x", self.ifreq_name, flags | IFF_UP))
