"""The runner's seccomp-BPF filter, assembled in pure Python and installed through ctypes.

Each runner installs it on itself (``harden.lock_down_runner``) before the candidate is
imported, with ``SECCOMP_FILTER_FLAG_TSYNC`` so every thread already running is covered;
the filter is inherited by every thread and process the candidate starts, and can never be
removed. It is a deny-list on top of the other layers (distinct uids, hidden pids, no
capabilities, ``no_new_privs``): the runner must still run torch, Triton (which spawns
``ptxas``) and the CUDA driver (which makes threads), so anything ordinary stays allowed.

Program, in order:

* architecture: the audit arch must be the one the filter was built for (x86_64 or aarch64;
  any other machine refuses to build a filter, so the runner never starts). A call made
  through another ABI (i386 ``int 0x80`` on x86_64) kills the process; x32 calls
  (``nr >= 0x40000000``) return EPERM.
* unknown syscalls: numbers above the newest one in these tables return ENOSYS, so a
  syscall added by a later kernel is refused until someone has looked at it (libc falls
  back on ENOSYS for new syscalls).
* denied with EPERM, and why:
  - ``ptrace``, ``process_vm_readv``/``writev``, ``kcmp``, ``pidfd_getfd``,
    ``process_madvise``, ``process_mrelease``: reading, writing or comparing another
    process's memory and descriptors -- the other runner's buffers, the judge's key;
  - ``kill``, ``tkill``, ``tgkill``, ``rt_sigqueueinfo``, ``rt_tgsigqueueinfo`` unless the
    target (pid/tgid, low 32 bits as the kernel reads ``pid_t``) is the runner's own pid;
    pid 0 and negative pids (process groups, -1 = everyone) are refused. This is the attack
    that motivated the layer: a helper SIGSTOPs the other runner during paired timing.
    The own pid is the runner's, baked in at install time, so a child the candidate starts
    can signal the runner but nothing else, and ``raise``/``abort`` (``tgkill`` on itself)
    still work;
  - every way a process can have the kernel SIGKILL it by its own doing, so that a runner
    dead of SIGKILL the judge did not send was killed from outside (``runner_killed``, the
    infrastructure's; ``sandbox.launcher.proc``): the kill family with signal 9 (argument 1
    of ``kill``, ``tkill``, ``rt_sigqueueinfo``; argument 2 of ``tgkill``,
    ``rt_tgsigqueueinfo``), also from a child; ``clone`` whose exit-signal byte (``flags &
    CSIGNAL``) is SIGKILL, delivered to the parent when the child exits; ``fcntl(F_SETSIG,
    SIGKILL)`` (the signal of ``O_ASYNC`` I/O, dnotify and lease breaks); ``timer_create``
    and ``mq_notify`` with any ``sigevent`` (its signal is in memory the filter cannot read,
    and the kernel accepts SIGKILL there; ``mq_notify``'s NULL, unregistering, stays
    allowed; deferred signals, below, refuse more of these); ``setrlimit`` and ``prlimit64`` with a new ``RLIMIT_CPU`` or ``RLIMIT_RTTIME``
    (the hard limit is a SIGKILL; the harness sets neither; reading them stays allowed).
    Each of these killed a runner in the sandbox (Linux 6.18) before its rule. Refused too,
    though no runner reaches them today: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (fires when
    the spawning thread exits; runners are spawned from the judge's main thread, which
    outlives them), ``prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT)`` and
    ``seccomp(SET_MODE_STRICT)`` (strict mode ends in ``do_exit(SIGKILL)``; the kernel
    refuses it once this filter is on), and ``ioctl(TIOCSIG, SIGKILL)`` on a pty master
    (the kernel allows only SIGINT, SIGQUIT, SIGTSTP there). An honest library that tries
    gets EPERM, never a death. Outside the filter: no cgroup file (``cgroup.kill``) is
    writable from a runner (bwrap mounts no /sys; docker's cgroup mounts are read-only), and
    the host tells a kernel OOM kill apart (``memory_limit``);
* denied with EPERM: every way to arm a signal that comes later, while the runner waits
  between calls, where its handler would run candidate code outside the timed call (it did:
  a SIGALRM handler computed the next answer while the judge wrote the inputs, and was
  accepted; ``sandbox.judge.idle``, ``docs/security-review.md``). ``timer_create`` whatever
  its sigevent (NULL is SIGALRM; SIGEV_THREAD makes a thread); ``setitimer`` with a new
  value (argument 1 non-NULL; ``getitimer`` stays allowed); ``alarm`` (x86_64) unless it is
  ``alarm(0)``; ``fcntl`` ``F_SETOWN``, ``F_SETOWN_EX``, ``F_SETSIG`` (any signal now, not
  only SIGKILL), ``F_NOTIFY`` (dnotify) and ``F_SETLEASE`` (lease breaks), and ``F_SETFL``
  with ``O_ASYNC`` in its flags; ``ioctl`` ``FIOASYNC``, ``FIOSETOWN``, ``SIOCSPGRP`` (the
  same for sockets and pipes; ``open`` ignores ``O_ASYNC``); ``clone`` whose exit signal is
  other than SIGCHLD or none. Neither torch nor Triton's interpreter arms timers or I/O
  signals (``tests/legit`` runs under the filter on the CPU); the CUDA driver's helpers are
  threads, and ``ptxas``/``gcc`` are processes that inherit the filter and are waited for
  with ``waitpid`` (a timeout in ``subprocess`` polls, it sets no timer): to be confirmed on
  each GPU host by the GPU suite (a refusal there is an EPERM, never a death). A signal
  from a helper process remains (``kill`` of the runner itself is allowed, see above): the
  judge counts processes and the runner's CPU between calls.
* ``clone3`` returns ENOSYS: its flags live in memory the filter cannot read, and libc
  falls back to ``clone``, whose flags it can.
* everything else is allowed.

What is left: the filter does not see memory arguments, so it cannot look into paths or
``clone3`` structs; ``setuid``-family calls are allowed because the runner holds no
capability to use them; the CPU and the GPU are shared with the other runner by time, which
the judge bounds by counting processes and interleaving the pairs. A SIGKILL the kernel
sends for reasons no syscall above controls (a driver's own kill, an exec that fails past
its point of no return on an old kernel) would read as ``runner_killed``: a retry, never a
pass.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from dataclasses import dataclass

from sandbox.launcher import caps

# seccomp_data: int nr; u32 arch; u64 ip; u64 args[6]  (little-endian on both arches)
OFF_NR, OFF_ARCH = 0, 4
RET_KILL_PROCESS, RET_ERRNO, RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
LD_W_ABS, JEQ_K, JGT_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x25, 0x35, 0x45, 0x06
ALU_AND_K = 0x54
X32_SYSCALL_BIT = 0x40000000
CLONE_NEW_MASK = 0x7E020000  # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
PERSONALITY_QUERY = 0xFFFFFFFF
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
# Self-SIGKILL routes (the same values on x86_64 and aarch64: asm-generic headers).
SIGKILL, CSIGNAL = 9, 0xFF
PR_SET_PDEATHSIG, PR_SET_SECCOMP, SECCOMP_MODE_STRICT, SECCOMP_SET_MODE_STRICT = 1, 22, 1, 0
F_SETSIG, TIOCSIG = 10, 0x40045436
# Deferred signals (asm-generic values, the same on x86_64 and aarch64): fcntl commands that
# make a file send its owner signals, the O_ASYNC flag, and the ioctls that do the same.
F_SETFL, F_SETOWN, F_SETOWN_EX, F_SETLEASE, F_NOTIFY, O_ASYNC = 4, 8, 15, 1024, 1026, 0o20000
FCNTL_SIGNALS = (F_SETOWN, F_SETSIG, F_SETOWN_EX, F_SETLEASE, F_NOTIFY)
FIOASYNC, FIOSETOWN, SIOCSPGRP = 0x5452, 0x8901, 0x8902
IOCTL_SIGNALS = (FIOASYNC, FIOSETOWN, SIOCSPGRP)
SIGCHLD = 17
RLIMIT_CPU, RLIMIT_RTTIME = 0, 15

# Syscalls the filter names. Numbers from 424 up are shared by every architecture.
_COMMON = {"pidfd_send_signal": 424, "io_uring_setup": 425, "io_uring_enter": 426,
           "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
           "fsconfig": 431, "fsmount": 432, "fspick": 433, "pidfd_open": 434, "clone3": 435,
           "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
           "process_mrelease": 448, "open_tree_attr": 467}
_X86_64 = {"clone": 56, "kill": 62, "ptrace": 101, "rt_sigqueueinfo": 129, "personality": 135,
           "pivot_root": 155, "mount": 165, "umount2": 166, "init_module": 175,
           "delete_module": 176, "tkill": 200, "tgkill": 234, "kexec_load": 246, "add_key": 248,
           "request_key": 249, "keyctl": 250, "unshare": 272, "rt_tgsigqueueinfo": 297,
           "perf_event_open": 298, "setns": 308, "process_vm_readv": 310,
           "process_vm_writev": 311, "kcmp": 312, "finit_module": 313, "kexec_file_load": 320,
           "bpf": 321, "userfaultfd": 323, "seccomp": 317, "ioctl": 16, "fcntl": 72,
           "prctl": 157, "setrlimit": 160, "timer_create": 222, "mq_notify": 244,
           "prlimit64": 302, "alarm": 37, "setitimer": 38}
_AARCH64 = {"umount2": 39, "mount": 40, "pivot_root": 41, "personality": 92, "unshare": 97,
            "kexec_load": 104, "init_module": 105, "delete_module": 106, "ptrace": 117,
            "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "add_key": 217,
            "request_key": 218, "keyctl": 219, "clone": 220, "rt_tgsigqueueinfo": 240,
            "perf_event_open": 241, "setns": 268, "process_vm_readv": 270,
            "process_vm_writev": 271, "kcmp": 272, "finit_module": 273, "bpf": 280,
            "userfaultfd": 282, "kexec_file_load": 294, "seccomp": 277, "ioctl": 29,
            "fcntl": 25, "timer_create": 107, "setrlimit": 164, "prctl": 167,
            "mq_notify": 184, "prlimit64": 261, "setitimer": 103}
# The newest syscall number known when these tables were checked (Linux 6.17: file_setattr).
MAX_KNOWN_NR = 469

DENY = ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
        "process_madvise", "process_mrelease", "pidfd_open", "pidfd_send_signal", "bpf",
        "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
        "io_uring_register", "keyctl", "add_key", "request_key", "mount", "umount2",
        "pivot_root", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "open_tree",
        "open_tree_attr", "mount_setattr", "unshare", "setns", "init_module", "finit_module",
        "delete_module", "kexec_load", "kexec_file_load")
SIGNAL_OWN_ONLY = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
# Which argument of each holds the signal number.
SIGNAL_ARG = {"kill": 1, "tkill": 1, "rt_sigqueueinfo": 1, "tgkill": 2, "rt_tgsigqueueinfo": 2}
# Syscalls whose sigevent (argument 1) the filter cannot read: refused unless it is NULL.
SIGEVENT = ("mq_notify",)
# Arming a timer that signals the runner later: refused. ``timer_create`` always (a NULL
# sigevent is SIGALRM; SIGEV_THREAD makes a thread), ``setitimer`` with a new value (argument
# 1; ``getitimer`` and a NULL query stay allowed), ``alarm`` (x86_64 only) unless it cancels.
TIMERS = ("timer_create", "setitimer", "alarm")


@dataclass(frozen=True)
class Arch:
    name: str
    audit: int
    table: dict[str, int]
    x32_bit: bool  # x86_64: the x32 ABI shares the audit arch, marked by a bit in nr


ARCHES = {"x86_64": Arch("x86_64", 0xC000003E, {**_X86_64, **_COMMON}, True),
          "aarch64": Arch("aarch64", 0xC00000B7, {**_AARCH64, **_COMMON}, False)}
_MACHINE_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


class SeccompError(OSError):
    """The filter cannot be built or installed here; the runner must not start."""


def arch_for(machine: str | None = None) -> Arch:
    m = (machine or platform.machine()).lower()
    arch = ARCHES.get(_MACHINE_ALIASES.get(m, m))
    if arch is None:
        raise SeccompError(errno.ENOSYS, f"no seccomp syscall table for machine {m!r}: "
                           "the runner refuses to start without its filter")
    return arch


def _arg_lo(i: int) -> int:
    return 16 + 8 * i  # low 32 bits of args[i]: pid_t, unsigned int and clone flags live there


def _arg_hi(i: int) -> int:
    return 20 + 8 * i  # high 32 bits of args[i] (a pointer is NULL only if both halves are 0)


class _Asm:
    """A tiny assembler: instructions with symbolic jump targets, resolved at the end."""

    def __init__(self) -> None:
        self.items: list[tuple[int, str | int, str | int, int] | str] = []

    def label(self, name: str) -> None:
        self.items.append(name)

    def op(self, code: int, k: int, jt: str | int = 0, jf: str | int = 0) -> None:
        self.items.append((code, jt, jf, k & 0xFFFFFFFF))

    def assemble(self) -> list[tuple[int, int, int, int]]:
        where: dict[str, int] = {}
        n = 0
        for it in self.items:
            if isinstance(it, str):
                where[it] = n
            else:
                n += 1
        out: list[tuple[int, int, int, int]] = []
        for it in self.items:
            if isinstance(it, str):
                continue
            code, jt, jf, k = it
            here = len(out) + 1
            jumps = [where[j] - here if isinstance(j, str) else j for j in (jt, jf)]
            if not all(0 <= j <= 255 for j in jumps):
                raise SeccompError(errno.E2BIG, f"BPF jump out of range at instruction {len(out)}")
            out.append((code, jumps[0], jumps[1], k))
        return out


def build(own_pid: int, arch: Arch) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) tuples for a runner whose pid is ``own_pid``."""
    t = arch.table
    a = _Asm()
    a.op(LD_W_ABS, OFF_ARCH)
    a.op(JEQ_K, arch.audit, 0, "kill")
    a.op(LD_W_ABS, OFF_NR)
    if arch.x32_bit:
        a.op(JGE_K, X32_SYSCALL_BIT, "eperm", 0)
    a.op(JGT_K, MAX_KNOWN_NR, "enosys", 0)
    for name in DENY:
        a.op(JEQ_K, t[name], "eperm", 0)
    a.op(JEQ_K, t["clone3"], "enosys", 0)
    for name in SIGNAL_OWN_ONLY:
        a.op(JEQ_K, t[name], f"signal_arg{SIGNAL_ARG[name]}", 0)
    for name, label in (("clone", "clone_flags"), ("personality", "personality"),
                        ("prctl", "prctl"), ("seccomp", "seccomp"), ("fcntl", "fcntl"),
                        ("ioctl", "ioctl"), ("setrlimit", "setrlimit"),
                        ("prlimit64", "prlimit64")):
        a.op(JEQ_K, t[name], label, 0)
    for name in SIGEVENT:
        a.op(JEQ_K, t[name], "sigevent", 0)
    a.op(JEQ_K, t["timer_create"], "eperm", 0)
    a.op(JEQ_K, t["setitimer"], "sigevent", 0)  # argument 1, the new value: NULL or refused
    if "alarm" in t:
        a.op(JEQ_K, t["alarm"], "alarm", 0)
    a.op(RET_K, RET_ALLOW)
    # Argument checks for the syscalls above; BPF jumps only forward, so every target is below.
    for i in (1, 2):  # the signal: never SIGKILL, then the target: the runner itself only
        a.label(f"signal_arg{i}")
        a.op(LD_W_ABS, _arg_lo(i))
        a.op(JEQ_K, SIGKILL, "eperm", "own_pid")
    a.label("own_pid")  # kill(pid), tkill(tid), tgkill(tgid, ...), rt_*sigqueueinfo(tgid, ...)
    a.op(LD_W_ABS, _arg_lo(0))
    a.op(JEQ_K, own_pid, "allow", "eperm")
    a.label("clone_flags")
    a.op(LD_W_ABS, _arg_lo(0))
    a.op(JSET_K, CLONE_NEW_MASK, "eperm", 0)
    a.op(ALU_AND_K, CSIGNAL)  # the exit signal the parent gets when the child ends
    a.op(JEQ_K, 0, "allow", 0)
    a.op(JEQ_K, SIGCHLD, "allow", "eperm")
    a.label("personality")
    a.op(LD_W_ABS, _arg_lo(0))
    a.op(JEQ_K, PERSONALITY_QUERY, "allow", "eperm")
    a.label("prctl")
    a.op(LD_W_ABS, _arg_lo(0))
    a.op(JEQ_K, PR_SET_PDEATHSIG, "arg1_sigkill", 0)
    a.op(JEQ_K, PR_SET_SECCOMP, 0, "allow")
    a.op(LD_W_ABS, _arg_lo(1))
    a.op(JEQ_K, SECCOMP_MODE_STRICT, "eperm", "allow")
    a.label("seccomp")
    a.op(LD_W_ABS, _arg_lo(0))
    a.op(JEQ_K, SECCOMP_SET_MODE_STRICT, "eperm", "allow")
    a.label("fcntl")  # fcntl(fd, cmd, arg): the int cmd in the low half
    a.op(LD_W_ABS, _arg_lo(1))
    for cmd in FCNTL_SIGNALS:
        a.op(JEQ_K, cmd, "eperm", 0)
    a.op(JEQ_K, F_SETFL, 0, "allow")
    a.op(LD_W_ABS, _arg_lo(2))
    a.op(JSET_K, O_ASYNC, "eperm", "allow")
    a.label("ioctl")  # ioctl(fd, request, ...): the kernel reads request as an unsigned int
    a.op(LD_W_ABS, _arg_lo(1))
    for request in IOCTL_SIGNALS:
        a.op(JEQ_K, request, "eperm", 0)
    a.op(JEQ_K, TIOCSIG, "arg2_sigkill", "allow")
    a.label("alarm")  # alarm(seconds): only alarm(0), which cancels, stays allowed
    a.op(LD_W_ABS, _arg_lo(0))
    a.op(JEQ_K, 0, "allow", "eperm")
    a.label("setrlimit")
    a.op(LD_W_ABS, _arg_lo(0))
    a.op(JEQ_K, RLIMIT_CPU, "eperm", 0)
    a.op(JEQ_K, RLIMIT_RTTIME, "eperm", "allow")
    a.label("prlimit64")  # prlimit64(pid, resource, new, old): reading a limit stays allowed
    a.op(LD_W_ABS, _arg_lo(1))
    a.op(JEQ_K, RLIMIT_CPU, "arg2_null", 0)
    a.op(JEQ_K, RLIMIT_RTTIME, "arg2_null", "allow")
    a.label("arg1_sigkill")
    a.op(LD_W_ABS, _arg_lo(1))
    a.op(JEQ_K, SIGKILL, "eperm", "allow")
    a.label("arg2_sigkill")
    a.op(LD_W_ABS, _arg_lo(2))
    a.op(JEQ_K, SIGKILL, "eperm", "allow")
    a.label("arg2_null")
    a.op(LD_W_ABS, _arg_lo(2))
    a.op(JEQ_K, 0, 0, "eperm")
    a.op(LD_W_ABS, _arg_hi(2))
    a.op(JEQ_K, 0, "allow", "eperm")
    a.label("sigevent")  # timer_create(clock, sevp, ...), mq_notify(mqd, sevp)
    a.op(LD_W_ABS, _arg_lo(1))
    a.op(JEQ_K, 0, 0, "eperm")
    a.op(LD_W_ABS, _arg_hi(1))
    a.op(JEQ_K, 0, "allow", "eperm")
    a.label("allow")
    a.op(RET_K, RET_ALLOW)
    a.label("eperm")
    a.op(RET_K, RET_ERRNO | errno.EPERM)
    a.label("enosys")
    a.op(RET_K, RET_ERRNO | errno.ENOSYS)
    a.label("kill")
    a.op(RET_K, RET_KILL_PROCESS)
    return a.assemble()


def pack(program: list[tuple[int, int, int, int]]) -> bytes:
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_installed_in: int | None = None


def installed() -> bool:
    """Whether this process (not a parent: the pid is checked) installed the filter."""
    return _installed_in == os.getpid()


def install() -> None:
    """Install the filter on every thread of this process. Fails closed (raises)."""
    global _installed_in
    arch = arch_for()
    program = build(os.getpid(), arch)
    raw = ctypes.create_string_buffer(pack(program))
    fprog = _Fprog(len(program), ctypes.addressof(raw))
    caps.prctl(caps.PR_SET_NO_NEW_PRIVS, 1, what="PR_SET_NO_NEW_PRIVS")
    libc = caps.libc()
    libc.syscall.restype = ctypes.c_long
    rc = libc.syscall(ctypes.c_long(arch.table["seccomp"]), ctypes.c_long(SECCOMP_SET_MODE_FILTER),
                      ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))
    if rc != 0:
        err = ctypes.get_errno() if rc < 0 else 0
        why = os.strerror(err) if rc < 0 else f"thread {rc} could not be synchronised"
        raise SeccompError(err or errno.EAGAIN, f"seccomp(SET_MODE_FILTER, TSYNC) failed: {why}")
    _installed_in = os.getpid()
