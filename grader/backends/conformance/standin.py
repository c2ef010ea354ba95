"""The launcher's privilege drop for snippets run without a judge (conformance checks).

The backends start the sandbox's first process as uid 0 holding only the launch
capabilities; in production that process is ``sandbox/launcher/launch.py``, which drops them
and execs the judge. A conformance test that runs its own snippet instead (no judge) runs it
through this stand-in: it checks the privilege contract every backend must give (uid 0,
effective = permitted = bounding = CAP_SETUID|CAP_SETGID|CAP_SYS_ADMIN, ``no_new_privs``),
then clears the ambient and inheritable sets, takes the supplementary groups in
``KGRADER_DEVICE_GIDS``, switches to uid/gid 65534 (which empties the permitted and
effective sets) and execs its arguments. It fails closed (exit 121) when the contract does
not hold.

It travels as ``python3 -c SOURCE ARGV...``: the backends run argv unchanged, so nothing
needs to be installed in the sandbox.
"""

from __future__ import annotations

CONTRACT_BROKEN = 121

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
    """``argv`` (a test snippet) as the sandbox's first process runs it: under the stand-in."""
    return ("python3", "-c", SOURCE, *argv)
