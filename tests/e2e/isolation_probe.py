"""Run by ``python3 -m sandbox.launcher.launch --then tests.e2e.isolation_probe`` in a bwrap sandbox.

Prints one JSON object. ``KG_PROBE=status`` reports only this process's credentials (the
judge's, after the launcher); ``KG_PROBE=judge`` plays the judge: it starts processes under
runner identities exactly as ``sandbox.launcher.proc`` does and records what each can see and do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from sandbox.launcher import caps, identity

_CHILD = """
import json, os, signal, sys, time
other, judge = int(sys.argv[1]), int(sys.argv[2])
def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return type(e).__name__
home = os.environ["HOME"]
print(json.dumps({
    "visible": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "stop_other": attempt(lambda: os.kill(other, signal.SIGSTOP)),
    "stop_judge": attempt(lambda: os.kill(judge, signal.SIGSTOP)),
    "read_other_status": attempt(lambda: open(f"/proc/{other}/status").read()),
    "list_other_home": attempt(lambda: os.listdir(sys.argv[3])),
    "write_own_home": attempt(lambda: open(os.path.join(home, "x"), "w").write("x")),
    "status": {l.split(":")[0]: l.split(":", 1)[1].strip() for l in open("/proc/self/status")
               if l.split(":")[0] in ("Uid", "Gid", "Groups", "CapEff", "CapPrm", "CapInh",
                                      "CapAmb", "NoNewPrivs")},
}), flush=True)
if len(sys.argv) > 4:
    os.system("setsid sleep 60 &")  # a helper in its own session: still the runner's uid
time.sleep(60)
"""


def _status() -> dict[str, Any]:
    st = caps.status("/proc/self/status")
    keys = ("Uid", "Gid", "Groups", "CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd", "NoNewPrivs")
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split(" - ")[1].split()[2] for line in f if line.split()[4] == "/proc"]
    return {"status": {k: st.get(k, "") for k in keys}, "launch": identity.launch_status(),
            "warnings": identity.launch_warnings(), "proc_options": mounts[-1] if mounts else None}


def _spawn(ident: identity.RunnerIdentity, *args: str) -> subprocess.Popen[str]:
    identity.prepare_fork()
    return subprocess.Popen([sys.executable, "-c", _CHILD, *args], stdout=subprocess.PIPE,
                            text=True, env={"PATH": "/usr/bin:/bin", **ident.env()},
                            start_new_session=True, user=ident.uid, group=ident.gid,
                            extra_groups=list(ident.groups), cwd=identity.spawn_cwd(ident))


def _judge() -> dict[str, Any]:
    a = identity.new_runner_identity("a.py")
    b = identity.new_runner_identity("b.py")
    out: dict[str, Any] = {"uids": [a.uid, b.uid], "homes": {}}
    for ident in (a, b):
        st = os.lstat(ident.home)
        out["homes"][str(ident.uid)] = [st.st_uid, oct(st.st_mode & 0o777)]
    pb = _spawn(b, "1", str(os.getpid()), a.home)
    pa = _spawn(a, str(pb.pid), str(os.getpid()), b.home, "spawn-helper")
    assert pa.stdout is not None and pb.stdout is not None
    out["a"], out["b"] = json.loads(pa.stdout.readline()), json.loads(pb.stdout.readline())
    out["pids"] = {"a": pa.pid, "b": pb.pid, "judge": os.getpid()}
    out["b_state_after_a"] = caps.status(f"/proc/{pb.pid}/status")["State"]
    time.sleep(0.5)  # a's helper (its own session) is running now
    expected = {pa.pid: a.uid, pb.pid: b.uid}
    out["check_with_helper"] = identity.check_runner_processes(expected)
    identity.kill_all(a)
    pa.wait(timeout=10)
    time.sleep(0.2)
    out["check_after_kill_a"] = identity.check_runner_processes({pb.pid: b.uid})
    out["check_b_only_without_expecting_it"] = identity.check_runner_processes({})
    identity.kill_all(b)
    pb.wait(timeout=10)
    out["check_after_kill_all"] = identity.check_runner_processes({})
    used = [identity.new_runner_identity(f"more{i}.py").uid for i in range(30)]
    out["all_uids_distinct"] = len({a.uid, b.uid, *used}) == 32
    try:
        identity.new_runner_identity("one-too-many.py")
        out["exhausted"] = None
    except identity.IsolationUnavailable as e:
        out["exhausted"] = str(e)
    return out


def main() -> None:
    mode = os.environ.get("KG_PROBE", "status")
    result = _status() if mode == "status" else _judge()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
