"""The embedded default backend: bubblewrap namespaces, no daemon.

Launch sequence, one step per line (isolate/nsjail style), each failing closed:

1. a per-evaluation cgroup (memory = memory+swap, pids) when the host offers one;
2. ``bwrap`` runs as root only to build the namespaces (net, pid, ipc, uts, mount, cgroup)
   and the read-only binds, then ``setpriv`` drops to uid/gid 65534 with no capabilities,
   an empty bounding set and ``no_new_privs`` before the judge's interpreter starts;
3. host-side: wall-clock limit, psutil watchdog, capped stdout/stderr;
4. teardown kills the whole tree (cgroup, process group, pid namespace) and removes the cgroup.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
from pathlib import Path

import structlog

from grader.backends import cgroups
from grader.backends.base import (
    HARNESS_MOUNT,
    IN_MOUNT,
    OUT_MOUNT,
    SANDBOX_GID,
    SANDBOX_UID,
    SCRATCH_MOUNT,
    Device,
    SandboxBackend,
    SandboxOutcome,
    SandboxSpec,
)
from grader.backends.watchdog import CappedReader, GpuMemoryWatchdog, Watchdog
from grader.errors import SandboxUnavailableError
from grader.limits import LimitName

log = structlog.get_logger("kgrader.bwrap")
HARNESS_SRC = Path(__file__).resolve().parents[2] / "sandbox"
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "passwd", "group",
              "localtime", "alternatives")
_GPU_ENV = ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH",
            "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
            "ROCM_PATH", "HIP_PATH")
_GPU_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "kfd")


def _python_roots() -> list[str]:
    """Directories the sandbox's interpreter needs: its prefix and every import root."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sysconfig.get_paths()["purelib"],
             sysconfig.get_paths()["platlib"], str(Path(sys.executable).resolve().parent)}
    for mod in ("torch", "triton", "numpy"):
        spec = __import__("importlib.util").util.find_spec(mod)
        if spec and spec.origin:
            roots.add(str(Path(spec.origin).resolve().parent.parent))
    extra = os.environ.get("KGRADER_BWRAP_RO", "")
    roots.update(p for p in extra.split(":") if p)
    out = sorted({r for r in roots if r and Path(r).exists()})
    # Drop roots already covered by another root (or by /usr).
    covered = ["/usr"]
    kept: list[str] = []
    for r in out:
        if not any(r == c or r.startswith(c.rstrip("/") + "/") for c in covered + kept):
            kept.append(r)
    return kept


def _mkdirs(dest: str) -> list[str]:
    """``--perms 0755 --dir`` for each ancestor, so uid 65534 can traverse to a bind."""
    args: list[str] = []
    parts = Path(dest).parts[1:-1]
    for i in range(len(parts)):
        args += ["--perms", "0755", "--dir", "/" + "/".join(parts[: i + 1])]
    return args


def _libcuda_dir() -> str | None:
    """Folder of the host's libcuda.so.1 (from LD_LIBRARY_PATH, the linker cache, or usual places)."""
    candidates = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
        candidates += [line.split("=>")[-1].strip().rsplit("/", 1)[0]
                       for line in out.splitlines() if "libcuda.so.1" in line]
    except (OSError, subprocess.SubprocessError):
        pass
    candidates += ["/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib"]
    for d in candidates:
        if Path(d, "libcuda.so.1").exists():
            return d
    return None


def gpu_nodes(device: Device, gpu_ids: tuple[str, ...]) -> list[str]:
    """Device nodes to bind: the control nodes plus only the selected GPUs."""
    if device == "cpu":
        return []
    nodes = [f"/dev/{n}" for n in _GPU_NODES if Path(f"/dev/{n}").exists()]
    if device == "cuda":
        ids = gpu_ids or ("0",)
        nodes += [f"/dev/nvidia{i}" for i in ids if Path(f"/dev/nvidia{i}").exists()]
        if Path("/dev/nvidia-caps").is_dir():
            nodes.append("/dev/nvidia-caps")
    else:  # rocm: only the render nodes asked for
        nodes += [f"/dev/dri/renderD{128 + int(i)}" for i in (gpu_ids or ("0",))]
    return nodes


class BwrapBackend(SandboxBackend):
    name = "bwrap"

    def __init__(self, bwrap: str | None = None):
        self.bwrap = bwrap or os.environ.get("KGRADER_BWRAP") or shutil.which("bwrap") or "bwrap"
        self.setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"

    def python(self) -> str:
        # Not resolved: a virtual environment's bin/python is a symlink to the base
        # interpreter, and only the unresolved path finds the environment's packages.
        return sys.executable

    def check_available(self, device: Device) -> None:
        if not shutil.which(self.bwrap) and not Path(self.bwrap).is_file():
            raise SandboxUnavailableError(
                "bubblewrap (bwrap) is not installed",
                hint="apt-get install -y bubblewrap, or set KGRADER_BWRAP to a bwrap binary")
        if not Path(self.setpriv).is_file():
            raise SandboxUnavailableError("setpriv (util-linux) is not installed",
                                          hint="apt-get install -y util-linux")
        if os.geteuid() != 0:
            raise SandboxUnavailableError(
                "the bwrap backend must start as root: it builds the namespaces as root and "
                "drops to uid 65534 before any harness code runs",
                hint="run kgrader as root, or use --backend docker")
        import importlib.util

        missing = [m for m in ("torch", "triton") if importlib.util.find_spec(m) is None]
        if missing:
            raise SandboxUnavailableError(
                f"{' and '.join(missing)} not importable by {sys.executable}: the bwrap sandbox "
                "runs the judge with this interpreter",
                hint="CPU: pip install torch==2.13.0 triton; GPU: a CUDA build of torch "
                     "(README, 'On a GPU host')")
        if device != "cpu" and not gpu_nodes(device, ()):
            raise SandboxUnavailableError(f"no {device} device nodes under /dev",
                                          hint="is the GPU driver loaded? try --device cpu")

    def argv(self, spec: SandboxSpec) -> list[str]:
        a = [self.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
             "--unshare-cgroup-try", "--die-with-parent", "--new-session",
             "--hostname", "kgrader", "--ro-bind", "/usr", "/usr"]
        for link in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            p = Path("/") / link
            if p.is_symlink():
                a += ["--symlink", os.readlink(p), f"/{link}"]
            elif p.is_dir():
                a += ["--ro-bind", str(p), f"/{link}"]
        for name in _ETC_FILES:
            if Path("/etc", name).exists():
                a += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        for root in _python_roots():
            a += [*_mkdirs(root), "--ro-bind", root, root]
        a += ["--proc", "/proc", "--dev", "/dev"]
        a += ["--size", str(spec.limits.tmpfs_mib << 20), "--perms", "1777", "--tmpfs", SCRATCH_MOUNT]
        a += ["--size", str(spec.limits.tmpfs_mib << 20), "--perms", "1777", "--tmpfs", "/dev/shm"]
        for node in gpu_nodes(spec.device, spec.gpu_ids):
            a += ["--dev-bind", node, node]
        if spec.device != "cpu":
            a += ["--ro-bind", "/sys", "/sys"]
            # Driver/toolkit folders outside /usr (those under it are already bound).
            for extra in ("/opt/rocm", "/opt/nvidia"):
                if Path(extra).exists():
                    a += [*_mkdirs(extra), "--ro-bind", extra, extra]
        a += [*_mkdirs(HARNESS_MOUNT + "/sandbox"), "--ro-bind", str(HARNESS_SRC), HARNESS_MOUNT + "/sandbox"]
        a += ["--perms", "0755", "--dir", "/kg", "--ro-bind", str(spec.in_dir), IN_MOUNT]
        a += ["--bind", str(spec.out_dir), OUT_MOUNT]
        a += ["--clearenv"]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": SCRATCH_MOUNT, "TMPDIR": SCRATCH_MOUNT,
               "PYTHONPATH": HARNESS_MOUNT, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
               "LANG": "C.UTF-8", **spec.env}
        if spec.device != "cpu":
            # The driver's and toolkit's locations, and the host's NVLink-multicast opt-outs.
            for key in _GPU_ENV:
                if key in os.environ:
                    env.setdefault(key, os.environ[key])
        if spec.device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(spec.gpu_ids) or "0"
            libcuda = _libcuda_dir()
            if libcuda and "TRITON_LIBCUDA_PATH" not in env:
                # Triton finds libcuda with `ldconfig -p`, which cannot run as uid 65534 in
                # the sandbox; tell it where the host's driver library is instead.
                env["TRITON_LIBCUDA_PATH"] = libcuda
        for k, v in sorted(env.items()):
            a += ["--setenv", k, v]
        a += ["--chdir", SCRATCH_MOUNT, "--", self.setpriv, f"--reuid={SANDBOX_UID}",
              f"--regid={SANDBOX_GID}", "--clear-groups", "--inh-caps=-all",
              "--bounding-set=-all", "--no-new-privs", *self._resolve(spec.argv)]
        return a

    def _resolve(self, argv: tuple[str, ...]) -> list[str]:
        return [self.python() if argv[0] in ("python", "python3") else argv[0], *argv[1:]]

    def run(self, spec: SandboxSpec) -> SandboxOutcome:
        self.check_available(spec.device)
        lim = spec.limits
        name = spec.label or uuid.uuid4().hex[:12]
        cg = cgroups.create(name, lim.memory_mib << 20, lim.pids)
        enforcement = {
            "memory": f"{cg.kind} memory.max=memory+swap" if cg else "psutil watchdog (RSS)",
            "pids": f"{cg.kind} pids.max" if cg else "psutil watchdog (threads)",
            "wall": "host timer, kills the pid namespace",
            "disk": f"tmpfs size={lim.tmpfs_mib} MiB",
            "output": f"capped at {lim.output_bytes} bytes per stream",
            "network": "empty network namespace (loopback only)",
        }

        def preexec() -> None:  # runs in the child, as root, before exec of bwrap
            if cg is not None:
                cg.attach(os.getpid())
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_FSIZE, (lim.tmpfs_mib << 20, lim.tmpfs_mib << 20))

        t0 = time.monotonic()
        log.info("sandbox_start", backend="bwrap", label=name, device=spec.device,
                 cgroup=cg.kind if cg else None)
        try:
            proc = subprocess.Popen(self.argv(spec), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    preexec_fn=preexec, start_new_session=True)
        except OSError as e:
            if cg:
                cg.destroy()
            raise SandboxUnavailableError(f"cannot start bwrap: {e}") from None
        out, err = CappedReader(proc.stdout, lim.output_bytes), CappedReader(proc.stderr, lim.output_bytes)  # type: ignore[arg-type]
        out.start()
        err.start()
        killed = threading.Event()

        def kill_tree() -> None:
            killed.set()
            if cg is not None:
                cg.kill_all()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

        dog = Watchdog(proc.pid, memory_bytes=None if cg else lim.memory_mib << 20,
                       pids=None if cg else lim.pids, kill=kill_tree,
                       pids_hit=cg.pids_hit if cg else None)
        dog.start()
        gdog = None
        if spec.device == "cuda" and lim.gpu_memory_mib:
            gdog = GpuMemoryWatchdog(proc.pid, lim.gpu_memory_mib << 20, kill_tree)
            enforcement["gpu_memory"] = ("runner allocator cap + NVML host watchdog" if gdog.available
                                         else "runner allocator cap (NVML unavailable on the host)")
            gdog.start()
        timed_out = False
        try:
            proc.wait(timeout=lim.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree()
            proc.wait()
        except BaseException:
            kill_tree()
            proc.wait()
            raise
        finally:
            dog.stop()
            if gdog is not None:
                gdog.stop()
            if cg is not None:
                cg.kill_all()
            out.join(5)
            err.join(5)
        wall = time.monotonic() - t0
        oom = bool(cg and cg.oom_killed()) or dog.fired == "memory_limit"
        pids_hit = bool(cg and cg.pids_hit()) or dog.fired == "pids_limit"
        if cg is not None:
            cg.destroy()
        rc = proc.returncode
        fired: LimitName | None = "timeout" if timed_out else (
            "memory_limit" if oom else ("pids_limit" if pids_hit else None))
        if fired is None and gdog is not None and gdog.fired:
            fired = gdog.fired
        if fired is None and rc is not None and rc in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
            fired = "disk_limit"
        log.info("sandbox_end", backend="bwrap", label=name, rc=rc, wall_s=round(wall, 3), fired=fired)
        return SandboxOutcome(
            backend="bwrap", exit_code=rc if rc is not None and rc >= 0 else None,
            signal=-rc if rc is not None and rc < 0 else None, wall_s=wall,
            stdout=bytes(out.buf), stderr=bytes(err.buf), timed_out=timed_out, oom_killed=oom,
            pids_limited=pids_hit, output_truncated=out.truncated or err.truncated,
            limit_fired=fired, enforcement=enforcement)
