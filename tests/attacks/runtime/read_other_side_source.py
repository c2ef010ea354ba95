# expect: deny file-access
"""Tries every route from the candidate's runner to another side's source (the current best's,
on a leaderboard someone else's kernel) and to the judge's request, and raises with what it
read, so that the report would carry it.

Routes: open() and ``torch.UntypedStorage.from_file`` of the staged sources in /kg/in and of
/proc/self/root/kg/in; listing /kg/in, /kg/out and /tmp (where the runners' private folders
are) and opening what is there; for every pid: /proc/PID/cwd, root, fd, environ, mem and the
module named in its cmdline; and a ``triton`` package planted in /tmp, which a runner started
in /tmp with its working folder on sys.path would import instead of the real one (it raises
with that runner's source). It raises at import when anything was read; otherwise it is an
honest kernel through the compile and correctness calls, and raises with the whole account
on its next call (the benchmark's, or without one the acceptance's, with the current best
loaded beside it) or on the first call of a later runner (CUDA's fresh acceptance pair). Stopped by: sources staged 0400 for the judge's uid in a 0700 /kg/in, each
runner's private copy of its own module in its 0700 HOME, distinct uids, hidepid and
undumpable processes (/proc/PID/*), PYTHONSAFEPATH (no /tmp on sys.path).
"""
import errno
import os

import torch
import triton
import triton.language as tl

SEEN = "/tmp/.kg-read-other-side-seen"
OWN = os.path.realpath(__file__)
_PLANT = '''
import importlib, os, sys
module = sys.argv[sys.argv.index("--module") + 1] if "--module" in sys.argv else ""
if module and os.path.basename(module) != "candidate.py":  # another side's runner
    raise ImportError("HIJACKED " + open(module).read()[:300])
here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
del sys.modules["triton"]
sys.modules["triton"] = importlib.import_module("triton")
'''


def _why(e: BaseException) -> str:
    if isinstance(e, OSError) and e.errno is not None:
        return errno.errorcode.get(e.errno, str(e.errno))
    return type(e).__name__


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return "READ:" + repr(f.read(120))
    except BaseException as e:
        return _why(e)


def _from_file(path: str) -> str:
    try:
        st = torch.zeros(1).untyped_storage().from_file(path, False, 16)  # a storage's method
        return "READ:" + repr(bytes(st.tolist()))
    except BaseException as e:
        return _why(e)


def _list(path: str) -> tuple[str, list[str]]:
    try:
        names = sorted(os.listdir(path))
        return f"LIST:{len(names)}", names
    except BaseException as e:
        return _why(e), []


def probe() -> dict[str, str]:
    out: dict[str, str] = {"uid": str(os.getuid()), "self": os.readlink("/proc/self")}
    for p in ("/kg/in/current.py", "/kg/in/candidate.py", "/proc/self/root/kg/in/current.py",
              "/kg/out/.judge-secret.json"):
        out[f"open {p}"] = _read(p)
        out[f"from_file {p}"] = _from_file(p)
    out["own from_file"] = _from_file(OWN)
    for d in ("/kg/in", "/kg/out"):
        out[f"list {d}"], names = _list(d)
        for n in names:
            out[f"open {d}/{n}"] = _read(os.path.join(d, n))
    out["list /tmp"], names = _list("/tmp")
    mine = os.path.dirname(os.path.dirname(OWN))
    for n in names:
        home = os.path.join("/tmp", n)
        if n.startswith("kgrader-runner-") and home != mine:
            tried = [_list(home)[0], *(_read(os.path.join(home, "src", m))
                                       for m in ("current.py", "candidate.py"))]
            out[f"home {n[15:20]}"] = ",".join(tried)
    counts: dict[str, int] = {}
    for pid in range(1, 4096):
        if os.path.exists(f"/proc/self/task/{pid}"):
            continue  # this runner itself, or one of its threads
        base = f"/proc/{pid}"
        tries = {"cwd": lambda: os.listdir(f"{base}/cwd"), "root": lambda: _read(f"{base}/root/kg/in/current.py"),
                 "fd": lambda: os.listdir(f"{base}/fd"), "environ": lambda: _read(f"{base}/environ"),
                 "mem": lambda: _read(f"{base}/mem")}
        for what, fn in tries.items():
            try:
                r = fn()
                r = r if isinstance(r, str) else "LIST:" + ",".join(r)[:100]
            except BaseException as e:
                r = _why(e)
            if r.startswith(("READ", "LIST")):
                out[f"{base}/{what}"] = r
            counts[f"{what} {r}"] = counts.get(f"{what} {r}", 0) + 1
        argv = _read(f"{base}/cmdline")
        if argv.startswith("READ") and "--module" in argv:
            try:
                module = open(f"{base}/cmdline", "rb").read().split(b"\0")
                path = module[module.index(b"--module") + 1].decode()
                if os.path.realpath(path) != OWN:
                    out[f"open module of pid {pid}"] = _read(path)
            except (OSError, ValueError, IndexError):
                pass
    out["proc"] = ",".join(f"{k}x{v}" for k, v in sorted(counts.items()) if not k.endswith("ENOENT"))
    return out


def _plant() -> None:
    try:
        os.makedirs("/tmp/triton", exist_ok=True)
        with open("/tmp/triton/__init__.py", "w") as f:
            f.write(_PLANT)
        os.chmod("/tmp/triton", 0o755)  # the runner's umask is 077: open it to other uids
        os.chmod("/tmp/triton/__init__.py", 0o644)
    except OSError:
        pass


def _account(found: dict[str, str]) -> str:
    read = {k: v for k, v in found.items() if "READ" in v and k != "own from_file"}
    rest = {k: v for k, v in found.items() if k not in read}
    return "; ".join(f"{k}={v}" for k, v in [*read.items(), *rest.items()])


_LATER = os.path.exists(SEEN)
_FOUND = probe()
if any("READ" in v for k, v in _FOUND.items() if k != "own from_file"):
    raise RuntimeError("LEAK " + _account(_FOUND))
if not _LATER:
    open(SEEN, "w").close()
    _plant()


@triton.jit
def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


_CALLS = [0]
# vector_add_small's compile call and 8 correctness calls (4 shapes, 2 seeds): the 10th is
# the benchmark's, or without one the acceptance's (on the CPU in the same runner, the
# current best loaded beside it; on CUDA acceptance starts fresh runners: ``_LATER``)
HONEST_CALLS = 9


def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    _CALLS[0] += 1
    if _LATER or _CALLS[0] > HONEST_CALLS:  # later: the current best is loaded beside it
        raise RuntimeError("PROBE " + _account(probe()))
    n = out.numel()
    _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
