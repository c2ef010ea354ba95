# ruff: noqa  (attack candidate: deliberately bad code)
"""Probe (template): reports what a candidate can see and do inside the sandbox, then adds.

The test fills PARAMS (a host listener's port on 127.0.0.1, a host sentinel path, a secret
env var set in the test process, a unique token) and reads one ``KGPROBE {json}`` line from
the sandbox's stderr. Nothing here ever contacts an address outside 127.0.0.0/8.
"""

import json
import os
import socket
import sys

import torch

PARAMS = {"port": 0, "sentinel": "", "secret_name": "", "secret_value": "", "token": "x"}


def _try(fn):
    try:
        return {"ok": True, "value": fn()}
    except BaseException as e:  # the probe reports every failure as data
        return {"ok": False, "error": type(e).__name__, "errno": getattr(e, "errno", None)}


def _interfaces():
    lines = open("/proc/net/dev").read().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines if ":" in line)


def _connect():
    s = socket.create_connection(("127.0.0.1", int(PARAMS["port"])), timeout=3)
    s.sendall(b"leak")
    s.close()
    return "connected"


def _environ_leaks():
    leaks = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            data = open(f"/proc/{pid}/environ", "rb").read()
        except OSError:
            continue
        if PARAMS["secret_value"].encode() in data:
            leaks.append(pid)
    return leaks


def _write(path):
    with open(path, "w") as f:
        f.write("x")
    return path


def probe():
    secret_name, secret_value = PARAMS["secret_name"], PARAMS["secret_value"]
    r = {
        "proc_net_dev": _try(_interfaces),
        "sys_class_net": _try(lambda: sorted(os.listdir("/sys/class/net"))),
        "connect": _try(_connect),
        "env_has_secret": secret_name in os.environ
        or any(secret_value in v for v in os.environ.values()),
        "environ_leaks": _environ_leaks(),
        "proc1_environ_has_secret": _try(
            lambda: secret_value.encode() in open("/proc/1/environ", "rb").read()),
        "sentinel_read": _try(lambda: open(PARAMS["sentinel"]).read()),
        "sentinel_write": _try(lambda: open(PARAMS["sentinel"], "a").write("pwned")),
        "host_files": {p: _try(lambda p=p: len(open(p, "rb").read()))
                       for p in ("/work/shared/DESIGN.md", "/root/.bashrc", "/etc/shadow")},
        "writes": {d: _try(lambda d=d: _write(os.path.join(d, "kgprobe-" + PARAMS["token"])))
                   for d in ("/", "/kg/in", "/kg/harness", "/kg/harness/sandbox", "/usr",
                             "/etc", "/tmp")},
        "append_candidate": _try(lambda: open("/kg/in/candidate.py", "a").write("#")),
        "euid": os.geteuid(),
    }
    status = {}
    for line in open("/proc/self/status").read().splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
                   "NoNewPrivs", "Seccomp"):
            status[key] = " ".join(value.split())
    r["status"] = status
    return r


print("KGPROBE " + json.dumps(probe(), separators=(",", ":")), file=sys.stderr, flush=True)


def launch(x, y, out):
    torch.add(x, y, out=out)
