"""The embedded default backend: bubblewrap namespaces, no daemon.

Launch sequence, one step per line (isolate/nsjail style), each failing closed:

1. GPU ids resolved by the shared rule (:mod:`grader.backends.gpu`); ``/kg/out`` made
   uid 65534 mode 0700; a scratch mount-point folder marked with its owner;
2. a per-evaluation cgroup (memory = memory+swap, pids) when the host offers one, named
   after its owner so that the backend's own reclaim, sweep and kill find it;
3. in the child, as root (:mod:`grader.backends.bwrap.hoststeps`): join the cgroup, rlimits, a
   network namespace with ``lo`` up, a private mount namespace with the scratch tmpfs
   mounts (size and inode caps), ``no_new_privs``, bounding set = the launch capabilities;
4. ``bwrap`` builds the pid, ipc, uts, mount and cgroup namespaces and the read-only binds
   and runs ``spec.argv`` as uid 0 with exactly CAP_SETUID, CAP_SETGID and CAP_SYS_ADMIN
   (``--cap-drop ALL --cap-add ...``). No user namespace: bwrap's maps a single uid and the
   launcher must switch to the judge's and the runners' uids;
5. host-side: wall-clock limit, psutil watchdog, drained and capped stdout/stderr;
6. teardown kills the whole tree (cgroup, process group, pid namespace), removes the
   cgroup; the scratch mounts vanish with the namespace.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import uuid
from pathlib import Path

from grader.backends import cgroups
from grader.backends.base import (
    HARNESS_MOUNT,
    IN_MOUNT,
    LAUNCH_CAPS,
    OUT_MOUNT,
    SCRATCH_MOUNT,
    SHM_MOUNT,
    Capabilities,
    Device,
    Reclaimed,
    SandboxBackend,
    SandboxOutcome,
    SandboxSpec,
    prepare_out_dir,
)
from grader.backends.bwrap.hoststeps import HostSteps, ScratchSpec
from grader.backends.bwrap.supervise import Supervision, supervise
from grader.backends.cleanup import current_owner, disk_full, mark_owner, remove_quietly, temp_base
from grader.backends.enforcement import (
    DiskEnforcement,
    Enforcement,
    GpuEnforcement,
    ScratchMount,
)
from grader.backends.gpu import (
    DEVICE_GIDS_ENV,
    GpuSelection,
    cuda_visible_devices,
    device_gids,
    device_nodes,
    resolve_gpu_ids,
)
from grader.backends.owner import owner_alive, owner_gone
from grader.backends.registry import sandbox_backend
from grader.errors import SandboxUnavailableError
from grader.logs import get_logger
from sandbox.contract import wire

log = get_logger("kgrader.bwrap")
HARNESS_SRC = Path(__file__).resolve().parents[3] / "sandbox"
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "passwd", "group",
              "localtime", "alternatives")
_GPU_ENV = ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH",
            "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
            "ROCM_PATH", "HIP_PATH")


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


def tool_path() -> str:
    """The sandbox's PATH: the interpreter's own scripts folder first (a virtual
    environment's ``bin/`` holds ninja, which torch's ``load_inline`` requires), then the
    CUDA toolkit's ``bin/`` (nvcc), then the system's. Every folder here is bound
    read-only already (the interpreter's prefix, /usr)."""
    dirs = [str(Path(sys.executable).parent), sysconfig.get_paths().get("scripts", "")]
    cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    dirs.append(str(Path(cuda) / "bin"))
    dirs += ["/usr/local/bin", "/usr/bin", "/bin"]
    out: list[str] = []
    for d in dirs:
        if d and d.startswith("/") and d not in out and Path(d).is_dir():
            out.append(d)
    return ":".join(out)


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


@sandbox_backend("bwrap")
class BwrapBackend(SandboxBackend):
    """Runs each sandbox in fresh bubblewrap namespaces; needs root, no daemon.

    Its leftovers are cgroups named after their owner (:mod:`grader.backends.cgroups`);
    the evaluation and scratch folders are the generic layer's (owner markers)."""

    name = "bwrap"
    # The supervisor waits on the device's turn after the sandbox started (a warm pool).
    capabilities = Capabilities(warm_start=True, devices=("cpu", "cuda", "rocm"),
                                leftovers="cgroups")

    @classmethod
    def kill_own(cls, owner: str) -> int:
        """``cgroup.kill`` and remove this process's cgroups (a forking tree cannot outrun
        it), and those of dead owners."""
        return len(cgroups.reclaim_stale(lambda o: o != owner and owner_alive(o)))

    @classmethod
    def remove_own(cls, owner: str) -> int:
        return cls.kill_own(owner)

    @classmethod
    def reclaim(cls, *, include_live: bool = False) -> Reclaimed:
        return Reclaimed(removed=tuple(cgroups.reclaim_stale(owner_alive,
                                                             include_live=include_live)))

    @classmethod
    def sweep(cls) -> Reclaimed:
        return Reclaimed(removed=tuple(cgroups.reclaim_stale(lambda o: not owner_gone(o))))

    def __init__(self, bwrap: str | None = None):
        self.bwrap = bwrap or os.environ.get("KGRADER_BWRAP") or shutil.which("bwrap") or "bwrap"

    def python(self) -> str:
        # Not resolved: a virtual environment's bin/python is a symlink to the base
        # interpreter, and only the unresolved path finds the environment's packages.
        return sys.executable

    def check_available(self, device: Device) -> None:
        if not shutil.which(self.bwrap) and not Path(self.bwrap).is_file():
            raise SandboxUnavailableError(
                "bubblewrap (bwrap) is not installed",
                hint="apt-get install -y bubblewrap, or set KGRADER_BWRAP to a bwrap binary")
        if os.geteuid() != 0:
            raise SandboxUnavailableError(
                "the bwrap backend must start as root: it builds the namespaces and mounts "
                "the capped scratch filesystems as root",
                hint="run kgrader as root, or use --backend docker")
        missing = [m for m in ("torch", "triton") if importlib.util.find_spec(m) is None]
        if missing:
            raise SandboxUnavailableError(
                f"{' and '.join(missing)} not importable by {sys.executable}: the bwrap sandbox "
                "runs the judge with this interpreter",
                hint="CPU: pip install torch==2.13.0 triton; GPU: a CUDA build of torch "
                     "(README, 'On a GPU host')")
        if device == "cuda" and not Path("/dev/nvidiactl").exists():
            raise SandboxUnavailableError("no /dev/nvidiactl: the NVIDIA driver is not loaded",
                                          hint="try --device cpu")
        if device == "rocm" and not Path("/dev/kfd").exists():
            raise SandboxUnavailableError("no /dev/kfd: the ROCm kernel driver is not loaded",
                                          hint="try --device cpu")

    def argv(self, spec: SandboxSpec, scratch_root: Path, gpu: GpuSelection,
             nodes: list[str], gids: tuple[int, ...]) -> list[str]:
        """The bwrap command line; ``scratch_root`` holds the ``tmp``/``shm`` mount points."""
        a = [self.bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts",
             "--unshare-cgroup-try", "--die-with-parent", "--new-session",
             "--hostname", "kgrader", "--ro-bind", "/usr", "/usr"]
        for link in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            p = Path("/") / link
            if p.is_symlink():
                a += ["--symlink", os.readlink(p), f"/{link}"]
            elif p.is_dir():
                a += ["--ro-bind", str(p), f"/{link}"]
        # Runners have uids of their own: every folder bwrap creates must be traversable
        # (bwrap made /etc 0700 here, and a runner could not resolve c++ -> /etc/alternatives).
        a += ["--perms", "0755", "--dir", "/etc"]
        for name in _ETC_FILES:
            if Path("/etc", name).exists():
                a += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        for root in _python_roots():
            a += [*_mkdirs(root), "--ro-bind", root, root]
        a += ["--proc", "/proc", "--dev", "/dev"]
        a += ["--bind", str(scratch_root / "tmp"), SCRATCH_MOUNT]
        a += ["--bind", str(scratch_root / "shm"), SHM_MOUNT]
        for node in nodes:
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
        for k, v in sorted(self._environment(spec, gpu, gids).items()):
            a += ["--setenv", k, v]
        a += ["--cap-drop", "ALL"]
        for cap in LAUNCH_CAPS:
            a += ["--cap-add", f"CAP_{cap}"]
        a += ["--chdir", SCRATCH_MOUNT, "--", *self._resolve(spec.argv)]
        return a

    def _environment(self, spec: SandboxSpec, gpu: GpuSelection,
                     gids: tuple[int, ...]) -> dict[str, str]:
        env = {"PATH": tool_path(), "HOME": SCRATCH_MOUNT, "TMPDIR": SCRATCH_MOUNT,
               "PYTHONPATH": HARNESS_MOUNT, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
               "LANG": "C.UTF-8", **spec.env, DEVICE_GIDS_ENV: ",".join(map(str, gids))}
        if os.environ.get(wire.PROFILE_ENV) == "1":  # an operator's bench (sandbox.judge.main)
            env[wire.PROFILE_ENV] = "1"
        if spec.device != "cpu":
            # The driver's and toolkit's locations, and the host's NVLink-multicast opt-outs.
            for key in _GPU_ENV:
                if key in os.environ:
                    env.setdefault(key, os.environ[key])
        if spec.device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices(gpu)
            libcuda = _libcuda_dir()
            if libcuda and "TRITON_LIBCUDA_PATH" not in env:
                # Triton finds libcuda with `ldconfig -p`, which cannot run as an
                # unprivileged uid in the sandbox; tell it where the driver library is.
                env["TRITON_LIBCUDA_PATH"] = libcuda
        return env

    def _resolve(self, argv: tuple[str, ...]) -> list[str]:
        """``spec.argv`` as given; only a bare ``python``/``python3`` becomes this interpreter
        (the sandbox sees the host's /usr and environments, not an image's PATH)."""
        if not argv:
            raise SandboxUnavailableError("empty argv")
        return [self.python() if argv[0] in ("python", "python3") else argv[0], *argv[1:]]

    def run(self, spec: SandboxSpec) -> SandboxOutcome:
        gpu = resolve_gpu_ids(spec.device, spec.gpu_ids)  # bad input first, on every backend
        self.check_available(spec.device)
        nodes = device_nodes(gpu)
        gids = device_gids(nodes)
        prepare_out_dir(spec.out_dir)
        lim = spec.limits
        name = spec.label or uuid.uuid4().hex[:12]
        try:
            scratch_root = Path(tempfile.mkdtemp(prefix="kgrader-scratch-", dir=temp_base()))
        except OSError as e:
            raise disk_full(e, temp_base()) or SandboxUnavailableError(
                f"cannot make the scratch mount points in {temp_base()}: {e}") from None
        try:
            mark_owner(scratch_root)
            scratch = (
                ScratchSpec(scratch_root / "tmp", lim.tmpfs_mib << 20, lim.tmpfs_inodes, False),
                ScratchSpec(scratch_root / "shm", lim.tmpfs_mib << 20, lim.tmpfs_inodes, True),
            )
            for s in scratch:
                s.host_dir.mkdir(mode=0o700)
            cg = cgroups.create(cgroups.owned_name(name, current_owner()), lim.memory_mib << 20,
                                lim.pids)
            steps = HostSteps(attach=cg.attach if cg else None, file_size=lim.file_size_bytes,
                              scratch=scratch)
            argv = self.argv(spec, scratch_root, gpu, nodes, gids)
            log.info("sandbox_start", backend=self.name, label=name, device=spec.device,
                     gpu_ids=list(gpu.ids), cgroup=cg.kind if cg else None)
            sup = supervise(argv, steps, spec, cg)
        finally:
            remove_quietly(scratch_root)
        outcome = sup.outcome(self._enforcement(spec, cg, sup, gpu, gids, scratch), self.name)
        log.info("sandbox_end", backend=self.name, label=name, rc=sup.returncode,
                 wall_s=round(outcome.wall_s, 3), fired=outcome.limit_fired)
        return outcome

    @staticmethod
    def _enforcement(spec: SandboxSpec, cg: cgroups.CgroupSet | None, sup: Supervision,
                     gpu: GpuSelection, gids: tuple[int, ...],
                     scratch: tuple[ScratchSpec, ...]) -> Enforcement:
        lim = spec.limits
        mounts = tuple(ScratchMount(path=path, size_bytes=s.size_bytes, inodes=s.inodes,
                                    options=s.describe())
                       for path, s in zip((SCRATCH_MOUNT, SHM_MOUNT), scratch, strict=True))
        gpu_mem = "not enforced"
        if sup.gpu_watchdog is not None and lim.gpu_memory_mib:
            gpu_mem = ("runner allocator cap + NVML host watchdog" if sup.gpu_watchdog
                       else "runner allocator cap (NVML unavailable on the host)")
        elif sup.gpu_watchdog is False:
            gpu_mem = "not enforced; NVML unavailable on the host, so another job on the GPU is unseen"
        return Enforcement(
            backend="bwrap",
            memory=(f"{cg.kind} memory limit {lim.memory_mib} MiB, swap 0" if cg
                    else f"psutil watchdog: tree RSS over {lim.memory_mib} MiB is killed"),
            pids=(f"{cg.kind} pids.max={lim.pids}; tree killed at the first refused fork" if cg
                  else f"psutil watchdog: more than {lim.pids} threads in the tree is killed"),
            cpu="no CPU quota (bwrap); bounded by the wall limit only",
            wall=f"host timer kills the whole tree (cgroup, session, pid namespace) after "
                 f"{lim.wall_s:.0f} s",
            disk=DiskEnforcement(
                mechanism="tmpfs mounted by kgrader in a private mount namespace of the "
                          "sandbox (bwrap --bind)",
                scratch=mounts, file_size_bytes=lim.file_size_bytes,
                out_dir="host disk; uid 65534 mode 0700 (only the judge's uid may write); "
                        "RLIMIT_FSIZE per file",
                read_only="bwrap read-only binds of /usr, the interpreter, /kg/in, /kg/harness; "
                          "a fresh tmpfs root"),
            output=f"both streams drained to the end; {lim.output_bytes} bytes kept in total",
            user="uid 0 in the sandbox with CAP_SETUID, CAP_SETGID, CAP_SYS_ADMIN only "
                 "(every capability set, ambient included), no_new_privs; no user namespace",
            network="new network namespace with only lo (up)",
            seccomp="none applied by the backend",
            gpu=GpuEnforcement(
                device=spec.device, ids=gpu.ids, defaulted=gpu.defaulted,
                mechanism="none" if spec.device == "cpu" else "bwrap --dev-bind of the "
                          "selected GPU nodes and the driver's control nodes",
                device_gids=gids, memory=gpu_mem if spec.device != "cpu" else "no GPU"),
        )
