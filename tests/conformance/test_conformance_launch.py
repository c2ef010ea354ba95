"""The privilege contract of the sandbox's first process, the same on every backend.

The backends run ``SandboxSpec.argv`` unchanged as uid 0 inside the sandbox with exactly
CAP_SETUID, CAP_SETGID and CAP_SYS_ADMIN and ``no_new_privs``, so that a launcher can
remount ``/proc`` with ``hidepid`` and start the judge and each runner under its own uid.
These tests run a probe *as* that first process (``raw``) and check what the launcher, the
judge's uid (65534) and a runner's uid (65500..65531) can and cannot do, and that the
limits still hold for processes that switched uids.
"""

from __future__ import annotations

import json
from typing import Any

from ._support import Host

LAUNCH_CAPS = (1 << 6) | (1 << 7) | (1 << 21)  # CAP_SETGID, CAP_SETUID, CAP_SYS_ADMIN

PROBE = r"""
import ctypes, errno, json, os
def err(e): return errno.errorcode.get(e.errno, str(e.errno))
r = {}
st = dict(line.split(":", 1) for line in open("/proc/self/status"))
r["status"] = {k: st[k].strip() for k in ("Uid", "CapInh", "CapEff", "CapPrm", "CapBnd",
                                          "CapAmb", "NoNewPrivs", "Seccomp")}
libc = ctypes.CDLL(None, use_errno=True)
MS_REMOUNT, MS_NOSUID, MS_NODEV, MS_NOEXEC = 32, 2, 4, 8
rc = libc.mount(b"proc", b"/proc", None, MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                b"hidepid=2")
r["remount_proc_hidepid"] = "ok" if rc == 0 else errno.errorcode[ctypes.get_errno()]
try:
    open("/kg/out/by-root", "w")
    r["root_writes_out"] = "ok"
except OSError as e:
    r["root_writes_out"] = err(e)
o = os.stat("/kg/out")
r["out"] = [o.st_uid, oct(o.st_mode & 0o7777)]
for p in ("/tmp", "/dev/shm"):
    s, v = os.stat(p), os.statvfs(p)
    r[p] = [oct(s.st_mode & 0o7777), v.f_files, v.f_blocks * v.f_frsize]

def as_uid(uid, fn):
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        os.write(wr, json.dumps(fn(uid)).encode())
        os._exit(0)
    os.close(wr)
    data = b""
    while chunk := os.read(rd, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)

def attempts(uid):
    res = {"sees_pid1": os.path.exists("/proc/1/status")}
    for name, fn in (("out", lambda: open(f"/kg/out/by-{uid}", "w")),
                     ("tmp_private_dir", lambda: os.mkdir(f"/tmp/u{uid}", 0o700)),
                     ("tmp_file", lambda: open(f"/tmp/u{uid}/f", "w"))):
        try:
            fn()
            res[name] = "ok"
        except OSError as e:
            res[name] = err(e)
    return res

r["judge"] = as_uid(65534, attempts)
r["runner"] = as_uid(65510, attempts)
r["other_runner_reads_tmp_dir"] = as_uid(65511, lambda u: os.access("/tmp/u65510", os.R_OK))
print(json.dumps(r))
"""


def _probe(host: Host) -> dict[str, Any]:
    outcome, out_dir = host.run_argv(PROBE, raw=True, tmpfs_mib=16, tmpfs_inodes=2048)
    assert outcome.exit_code == 0, outcome
    seen: dict[str, Any] = json.loads(outcome.stdout.decode().strip().splitlines()[-1])
    assert (out_dir / "by-65534").exists() and not (out_dir / "by-65510").exists()
    return seen


def test_first_process_is_root_with_exactly_the_launch_capabilities(host: Host) -> None:
    st = _probe(host)["status"]
    assert st["Uid"].split() == ["0"] * 4, st
    for key in ("CapEff", "CapPrm", "CapBnd"):
        assert int(st[key], 16) == LAUNCH_CAPS, f"{key}={st[key]}"
    # Ambient/inheritable may carry the same three (bwrap sets them); never more.
    for key in ("CapInh", "CapAmb"):
        assert int(st[key], 16) & ~LAUNCH_CAPS == 0, f"{key}={st[key]}"
    assert st["NoNewPrivs"] == "1", st
    expected_seccomp = "2" if host.backend == "docker" else "0"  # docker's default profile
    assert st["Seccomp"] == expected_seccomp, st
    host.assert_unharmed()


def test_launcher_may_remount_proc_with_hidepid(host: Host) -> None:
    # Under docker this also shows that its default seccomp profile allows mount(2) to a
    # process holding CAP_SYS_ADMIN.
    seen = _probe(host)
    assert seen["remount_proc_hidepid"] == "ok", seen
    assert seen["runner"]["sees_pid1"] is False, "hidepid=2 did not hide other uids' processes"
    host.assert_unharmed()


def test_only_the_judge_uid_may_write_kg_out(host: Host) -> None:
    seen = _probe(host)
    assert seen["out"] == [65534, "0o700"], seen
    assert seen["judge"]["out"] == "ok", seen
    assert seen["runner"]["out"] == "EACCES", seen
    # Not even the launcher: uid 0 without CAP_DAC_OVERRIDE is just another uid here.
    assert seen["root_writes_out"] == "EACCES", seen
    host.assert_unharmed()


def test_scratch_is_sticky_world_writable_and_capped_in_size_and_inodes(host: Host) -> None:
    seen = _probe(host)
    for path in ("/tmp", "/dev/shm"):
        mode, inodes, size = seen[path]
        assert mode == "0o1777", seen
        assert inodes == 2048, seen
        assert size == 16 << 20, seen
    assert seen["runner"]["tmp_private_dir"] == "ok" and seen["runner"]["tmp_file"] == "ok"
    assert seen["other_runner_reads_tmp_dir"] is False, "a runner read another's private dir"
    host.assert_unharmed()


SWITCHED_UID_BOMB = r"""
import os
os.setgroups([]); os.setresgid(65520, 65520, 65520); os.setresuid(65520, 65520, 65520)
blocks = []
while True:
    blocks.append(bytearray(16 << 20))
"""


def test_memory_limit_still_covers_a_process_that_switched_uid(host: Host) -> None:
    outcome, _ = host.run_argv(SWITCHED_UID_BOMB, raw=True, memory_mib=256)
    assert outcome.limit_fired == "memory_limit", outcome
    assert outcome.oom_killed, outcome
    host.assert_unharmed()


SWITCHED_UID_FORK_BOMB = r"""
import os, time
os.setgroups([]); os.setresgid(65521, 65521, 65521); os.setresuid(65521, 65521, 65521)
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"""


def test_pids_limit_still_covers_a_process_that_switched_uid(host: Host) -> None:
    outcome, _ = host.run_argv(SWITCHED_UID_FORK_BOMB, raw=True, pids=32)
    assert outcome.limit_fired == "pids_limit", outcome
    assert outcome.wall_s < 30, outcome
    host.assert_unharmed()
