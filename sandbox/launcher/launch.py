"""The sandbox's first process: hide processes, drop privileges, then exec the judge.

Both backends run ``python3 -m sandbox.launcher.launch`` as uid 0 inside the sandbox with exactly
CAP_SETUID, CAP_SETGID and CAP_SYS_ADMIN (CAP_SETPCAP too where the backend grants it) and
``no_new_privs`` set. This module is trusted and imports the standard library only. Its work
is a flat list of steps (isolate/nsjail style); each step either holds or stops the launch
with exit status 71 and one ``kgrader-launch: <step>: <why>`` line on stderr, so the judge
never starts half-confined:

1. ``no_new_privs`` -- set again (idempotent): no setuid binary or file capability can ever
   raise what this process or any descendant holds, including the judge's runners.
2. ``hide_pids`` -- remount the sandbox's own procfs (its own pid namespace, so nothing
   outside changes) with ``hidepid=invisible,gid=65534`` (``hidepid=2`` on kernels before
   5.8), falling back to a fresh proc mount on ``/proc``. A process then sees only the
   processes it could ptrace -- for a runner, those of its own uid -- while the judge,
   whose gid is the exempt ``gid=``, sees all of them (it counts each runner's processes).
   Remount comes first because docker masks parts of ``/proc`` (``kcore``, ``keys``,
   ``sched_debug``...) with mounts on top, which a fresh mount would uncover. The result
   is read back from ``/proc/self/mountinfo``. Where every mount is refused (docker's
   AppArmor profile refuses mount(2) even with CAP_SYS_ADMIN), the launch CONTINUES and the
   refusal is recorded for the judge to report: what still holds without hidepid is that
   runners have distinct uids (no signals, no ptrace, no ``/proc/PID/{mem,environ,fd}``)
   and the seccomp filter; what is lost is that a runner can list other processes and read
   their ``cmdline``/``stat`` (names, CPU times), which leak no secret the judge holds.
3. ``drop_bounding`` -- with CAP_SETPCAP, drop every capability but CAP_SETUID/CAP_SETGID
   from the bounding set, then CAP_SETPCAP itself. Without CAP_SETPCAP the bounding set is
   kept and recorded: ``no_new_privs`` already stops an exec from gaining anything beyond
   the permitted set, so the bounding set is a second wall, not the first.
4. ``switch_user`` -- supplementary groups (only the GPU device-node gids named in
   ``KGRADER_DEVICE_GIDS``), then gid and uid 65534 with ``PR_SET_KEEPCAPS``; then the
   effective, permitted, inheritable and ambient sets become exactly {CAP_SETUID,
   CAP_SETGID}. CAP_SYS_ADMIN is gone from every set. The ambient set carries the two
   capabilities across the exec (there are no file capabilities to do it): the judge needs
   them to start each runner under its own uid (``sandbox.launcher.identity``), and it clears its
   inheritable and ambient sets on the forking thread before each runner's exec, so a
   runner holds no capability at all.
5. ``verify`` -- read the kernel's own view (``/proc/self/status``): uids, gids, groups,
   the four capability sets and ``NoNewPrivs``. Any difference stops the launch.
6. ``exec`` -- ``sys.executable -m sandbox.judge.main``, with the launch record in the
   environment variable ``KGRADER_LAUNCH`` (JSON) and ``PYTHONSAFEPATH=1``: the judge's
   working folder is the shared ``/tmp``, where a runner could plant a module the judge
   would import later (a lazy import after the candidate ran) with the record's key in
   reach; with safe paths only ``PYTHONPATH`` and the installation are searched. ``--then MODULE`` (from this process's own
   argv only, never from the environment) names another module; tests use it for probes.

What is left to the judge: it holds CAP_SETUID/CAP_SETGID for the whole run (so a bug in the
judge is still a bug in a privileged process), and it sees every process; no runner can
signal, ptrace or read it, since it runs under another uid and is not dumpable.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
from typing import NoReturn

from sandbox.launcher import caps

JUDGE_UID = JUDGE_GID = 65534
STATUS_ENV = "KGRADER_LAUNCH"
DEVICE_GIDS_ENV = "KGRADER_DEVICE_GIDS"
SAFE_PATH_ENV = "PYTHONSAFEPATH"  # no working folder on sys.path (Python 3.11)
EXIT_LAUNCH_FAILED = 71
KEEP = caps.mask(caps.CAP_SETUID, caps.CAP_SETGID)
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 0x2, 0x4, 0x8, 0x20
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class LaunchError(Exception):
    def __init__(self, step: str, message: str):
        super().__init__(f"{step}: {message}")
        self.step = step


def device_gids(raw: str | None) -> tuple[int, ...]:
    """Supplementary gids for GPU device nodes. Root's group and the judge's are refused."""
    if not raw:
        return ()
    try:
        gids = tuple(sorted({int(x) for x in raw.split(",") if x.strip()}))
    except ValueError:
        raise LaunchError("groups", f"{DEVICE_GIDS_ENV}={raw!r} is not a comma-separated gid list") from None
    bad = [g for g in gids if g <= 0 or g >= 65500]
    if bad:
        raise LaunchError("groups", f"{DEVICE_GIDS_ENV} names gids {bad}: root's group and the "
                          "sandbox's own gids (65500..65534) are never granted as device groups")
    return gids


def step_no_new_privs() -> None:
    try:
        caps.prctl(caps.PR_SET_NO_NEW_PRIVS, 1, what="PR_SET_NO_NEW_PRIVS")
    except caps.CapError as e:
        raise LaunchError("no_new_privs", str(e)) from None


def _proc_options() -> str | None:
    """The super options of the topmost mount on /proc, or None without one."""
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if len(fields) > 4 and fields[4] == "/proc":
                parts = right.split()
                found = parts[2] if len(parts) > 2 else ""
    return found


def proc_hidden(options: str | None, gid: int) -> bool:
    opts = set((options or "").split(","))
    return bool(opts & {"hidepid=invisible", "hidepid=2"}) and f"gid={gid}" in opts


def step_hide_pids(gid: int) -> dict[str, object]:
    """Hide other uids' processes; never fatal (see the module docstring), always recorded."""
    mount = caps.libc().mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    base = MS_NOSUID | MS_NODEV | MS_NOEXEC
    refused: list[str] = []
    for how, flags in (("remount", base | MS_REMOUNT), ("fresh mount", base)):
        for mode in ("invisible", "2"):
            opts = f"hidepid={mode},gid={gid}"
            if mount(b"proc", b"/proc", b"proc", flags, opts.encode()) != 0:
                err = ctypes.get_errno()
                refused.append(f"{how} {opts}: {os.strerror(err)}")
                continue
            shown = _proc_options()
            if proc_hidden(shown, gid):
                return {"hidden": True, "how": f"{how} {opts}", "options": shown}
            refused.append(f"{how} {opts}: accepted but /proc shows {shown!r}")
    return {"hidden": False, "refused": refused}


def step_drop_bounding() -> str:
    if not caps.get().effective & caps.mask(caps.CAP_SETPCAP):
        return "kept (no CAP_SETPCAP); no_new_privs bounds every exec to the permitted set"
    try:
        for cap in range(caps.last_cap() + 1):
            if cap not in (caps.CAP_SETUID, caps.CAP_SETGID, caps.CAP_SETPCAP) \
                    and caps.prctl(caps.PR_CAPBSET_READ, cap) == 1:
                caps.prctl(caps.PR_CAPBSET_DROP, cap, what=f"drop bounding cap {cap}")
        caps.prctl(caps.PR_CAPBSET_DROP, caps.CAP_SETPCAP, what="drop bounding CAP_SETPCAP")
    except caps.CapError as e:
        raise LaunchError("drop_bounding", str(e)) from None
    return "CAP_SETUID,CAP_SETGID only"


def step_switch_user(uid: int, gid: int, groups: tuple[int, ...]) -> None:
    have = caps.get()
    if have.effective & KEEP != KEEP:
        raise LaunchError("switch_user", f"CAP_SETUID and CAP_SETGID are required (effective set "
                          f"{have.effective:#x}); the backend must grant them to the launcher")
    try:
        caps.prctl(caps.PR_SET_KEEPCAPS, 1, what="PR_SET_KEEPCAPS")
        os.setgroups(list(groups))
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        caps.set_sets(KEEP, KEEP, KEEP)  # CAP_SYS_ADMIN (and all else) leaves every set here
        caps.raise_ambient(caps.CAP_SETUID)
        caps.raise_ambient(caps.CAP_SETGID)
        caps.prctl(caps.PR_SET_KEEPCAPS, 0, what="PR_SET_KEEPCAPS off")
    except OSError as e:
        raise LaunchError("switch_user", str(e)) from None


def step_verify(uid: int, gid: int, groups: tuple[int, ...]) -> None:
    st = caps.status("/proc/self/status")
    want = {"Uid": (uid,) * 4, "Gid": (gid,) * 4, "Groups": tuple(sorted(groups))}
    for key, value in want.items():
        got = tuple(sorted(caps.status_ids(st, key))) if key == "Groups" else caps.status_ids(st, key)
        if got != value:
            raise LaunchError("verify", f"{key} is {got}, expected {value}")
    for key in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
        if caps.status_mask(st, key) != KEEP:
            raise LaunchError("verify", f"{key} is {st.get(key)}, expected {KEEP:#018x}")
    if st.get("NoNewPrivs") != "1":
        raise LaunchError("verify", "no_new_privs is not set")


def parse_then(argv: list[str]) -> str:
    if not argv:
        return "sandbox.judge.main"
    if len(argv) == 2 and argv[0] == "--then" and _MODULE.match(argv[1]):
        return argv[1]
    raise LaunchError("arguments", f"usage: python3 -m sandbox.launcher.launch [--then MODULE]; got {argv!r}")


def main(argv: list[str]) -> NoReturn:
    try:
        module = parse_then(argv)
        if os.getuid() != 0:
            raise LaunchError("start", f"the launcher starts as uid 0, not {os.getuid()}")
        groups = device_gids(os.environ.get(DEVICE_GIDS_ENV))
        step_no_new_privs()
        proc = step_hide_pids(JUDGE_GID)
        bounding = step_drop_bounding()
        step_switch_user(JUDGE_UID, JUDGE_GID, groups)
        step_verify(JUDGE_UID, JUDGE_GID, groups)
    except LaunchError as e:
        sys.stderr.write(f"kgrader-launch: {e}\n")
        sys.stderr.flush()
        os._exit(EXIT_LAUNCH_FAILED)
    record = {"launcher": "sandbox.launcher.launch", "judge_uid": JUDGE_UID, "judge_gid": JUDGE_GID,
              "groups": list(groups), "proc": proc, "bounding_set": bounding,
              "judge_caps": "CAP_SETUID,CAP_SETGID (effective, permitted, inheritable, ambient)"}
    env = dict(os.environ)
    env[STATUS_ENV] = json.dumps(record, sort_keys=True)
    env[SAFE_PATH_ENV] = "1"
    sys.stdout.flush()
    try:
        os.execve(sys.executable, [sys.executable, "-m", module], env)
    except OSError as e:
        sys.stderr.write(f"kgrader-launch: exec: {sys.executable}: {e}\n")
        sys.stderr.flush()
        os._exit(EXIT_LAUNCH_FAILED)


if __name__ == "__main__":
    main(sys.argv[1:])
