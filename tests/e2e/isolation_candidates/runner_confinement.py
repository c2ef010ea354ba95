# ruff: noqa  (a probe candidate: inspects its own process before computing)
"""Checks, from inside the runner, everything the runner isolation promises; raises a
message naming the first promise that does not hold, else computes the right answer."""
import ctypes
import os
import stat

import torch
import triton
import triton.language as tl


def _status(pid="self"):
    return {l.split(":")[0]: l.split(":", 1)[1].strip() for l in open(f"/proc/{pid}/status")}


def _check():
    st = _status()
    uid = os.getuid()
    assert 65500 <= uid <= 65531, f"runner uid {uid}"
    assert st["Uid"].split() == [str(uid)] * 4 and st["Gid"].split() == [str(uid)] * 4, st
    for key in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
        assert int(st[key], 16) == 0, f"{key}={st[key]}"
    assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2", st
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(3, 0, 0, 0, 0) == 0, "runner is dumpable"  # PR_GET_DUMPABLE
    home = os.environ["HOME"]
    hs = os.lstat(home)
    assert hs.st_uid == uid and stat.S_IMODE(hs.st_mode) == 0o700, (home, hs)
    assert os.environ["TMPDIR"].startswith(home + "/") and os.getcwd() == home
    for p in os.listdir("/proc"):
        if p.isdigit():
            owner = _status(p)["Uid"].split()[0]
            assert owner == str(uid), f"/proc shows pid {p} of uid {owner}"
    judge = os.getppid()
    assert not os.path.exists(f"/proc/{judge}"), "the judge is visible"
    try:
        os.kill(judge, 0)
        raise AssertionError("the judge can be signalled")
    except PermissionError:
        pass
    try:
        open("/kg/out/planted", "w")
        raise AssertionError("/kg/out is writable")
    except PermissionError:
        pass


_check()


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def launch(x, y, out):
    _check()
    n = out.numel()
    _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
