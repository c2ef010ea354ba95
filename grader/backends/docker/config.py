"""The container's configuration: :func:`container_kwargs`, a pure function of the spec.

Every security-relevant choice is made here, and unit-tested without a daemon:

* network: ``network_mode="none"`` (only ``lo``);
* privileges: the first process (``spec.argv``, the launcher) runs as uid 0 with
  ``cap_drop=ALL`` + ``cap_add`` of exactly the launch capabilities, ``no-new-privileges``
  and docker's default seccomp profile (which allows ``mount(2)`` only with
  ``CAP_SYS_ADMIN``; the launcher's ``/proc`` remount with ``hidepid`` works under it);
* filesystem: read-only root; ``/kg/in`` and the harness read-only binds; ``/kg/out`` a
  bind of a uid-65534, mode-0700 folder; ``/tmp`` and ``/dev/shm`` tmpfs with ``size=``
  and ``nr_inodes=``, mode 1777; ``RLIMIT_FSIZE`` on every file;
* memory (== memory+swap), pids, CPU: the container's cgroup;
* GPUs: ``device_requests`` with explicit NVIDIA ids, or ``/dev/kfd`` plus the named
  render nodes (ROCm); ids resolved by the shared rule of :mod:`grader.backends.gpu`.

The docker SDK's types are imported where the arguments are built, so that the backend's
class (and its lifecycle methods) load without the SDK.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from grader.backends.base import (
    HARNESS_MOUNT,
    IN_MOUNT,
    LAUNCH_CAPS,
    OUT_MOUNT,
    SCRATCH_MOUNT,
    SHM_MOUNT,
    SandboxSpec,
)
from grader.backends.gpu import (
    DEVICE_GIDS_ENV,
    NVIDIA_CONTROL_NODES,
    GpuSelection,
    device_gids,
    resolve_gpu_ids,
)
from grader.backends.owner import current_owner
from sandbox.contract.wire import TETHER_ENV

LABEL = "kgrader"
LABEL_RUN = "kgrader.label"
LABEL_OWNER = "kgrader.owner"
HOST_HARNESS = Path(__file__).resolve().parents[3] / "sandbox"
SCRATCH_OPTIONS = "rw,exec,nosuid,nodev"  # exec: Triton/load_inline dlopen what they build
SHM_OPTIONS = "rw,noexec,nosuid,nodev"
_PROXY_VAR = re.compile(r"(?i)^(all|https?|ftp|no|socks)_proxy$")


def gpu_node_gids(gpu: GpuSelection) -> tuple[int, ...]:
    """Groups runner uids need for the GPU nodes docker will expose (host nodes' groups)."""
    if gpu.device == "cpu":
        return ()
    if gpu.device == "rocm":
        nodes = ["/dev/kfd", *(f"/dev/dri/{g}" for g in gpu.ids)]
    else:
        nodes = [f"/dev/{n}" for n in NVIDIA_CONTROL_NODES]
        nodes += [f"/dev/nvidia{g}" for g in gpu.ids if g.isdigit()]
    return device_gids([n for n in nodes if Path(n).exists()])


def gpu_options(gpu: GpuSelection, gids: tuple[int, ...]) -> dict[str, Any]:
    """Device options: explicit NVIDIA ids, or /dev/kfd plus the named render nodes."""
    if gpu.device == "cpu":
        return {}
    if gpu.device == "cuda":
        from docker.types import DeviceRequest

        request = DeviceRequest(driver="nvidia", device_ids=list(gpu.ids), capabilities=[["gpu"]])
        return {"device_requests": [request]}
    nodes = ["/dev/kfd", *(f"/dev/dri/{g}" for g in gpu.ids)]
    return {"devices": [f"{n}:{n}:rw" for n in nodes], "group_add": [str(g) for g in gids]}


def environment(spec: SandboxSpec, gids: tuple[int, ...]) -> dict[str, str]:
    """The container's whole environment: the spec's (minus proxies) plus fixed keys."""
    env = {k: v for k, v in spec.env.items() if not _PROXY_VAR.match(k)}
    if spec.device == "cuda":
        env["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility"
    else:
        # Neutralises an image default of "all" on hosts whose default runtime is nvidia.
        env["NVIDIA_VISIBLE_DEVICES"] = "void"
    # Thread pools size themselves to the host's cores, not the CPU quota; on a big host
    # that alone can exhaust the pids limit.
    env.setdefault("OMP_NUM_THREADS", str(max(1, math.ceil(spec.limits.cpus))))
    env.update(PYTHONPATH=HARNESS_MOUNT, HOME=SCRATCH_MOUNT, TMPDIR=SCRATCH_MOUNT)
    env[DEVICE_GIDS_ENV] = ",".join(map(str, gids))
    env[TETHER_ENV] = "stdin"  # the judge ends when the host's stdin attach closes
    return env


def tmpfs_options(spec: SandboxSpec) -> dict[str, str]:
    """``/tmp`` and ``/dev/shm``: each capped in size and inodes, world-writable + sticky."""
    lim = spec.limits
    caps = f"size={lim.tmpfs_mib}m,nr_inodes={lim.tmpfs_inodes},mode=1777"
    return {SCRATCH_MOUNT: f"{SCRATCH_OPTIONS},{caps}", SHM_MOUNT: f"{SHM_OPTIONS},{caps}"}


def container_kwargs(
    spec: SandboxSpec,
    image: str,
    *,
    harness_dir: Path = HOST_HARNESS,
    name: str | None = None,
    gpu: GpuSelection | None = None,
) -> dict[str, Any]:
    """Arguments for ``client.containers.create`` that run ``spec`` locked down.

    Pure apart from resolving GPU ids when ``gpu`` is not given (environment, KFD topology)
    and reading the GPU nodes' groups.
    """
    from docker.types import LogConfig, Mount, Ulimit

    lim = spec.limits
    gpu = gpu or resolve_gpu_ids(spec.device, spec.gpu_ids)
    gids = gpu_node_gids(gpu)
    return {
        "image": image,
        "name": name,
        "entrypoint": list(spec.argv[:1]),
        "command": list(spec.argv[1:]),
        "environment": environment(spec, gids),
        "user": "0:0",
        "working_dir": SCRATCH_MOUNT,
        "labels": {LABEL: "1", LABEL_RUN: spec.label, LABEL_OWNER: current_owner()},
        "network_mode": "none",
        "read_only": True,
        "mounts": [
            Mount(f"{HARNESS_MOUNT}/sandbox", str(harness_dir), type="bind", read_only=True),
            Mount(IN_MOUNT, str(spec.in_dir), type="bind", read_only=True),
            Mount(OUT_MOUNT, str(spec.out_dir), type="bind", read_only=False),
        ],
        "tmpfs": tmpfs_options(spec),
        "cap_drop": ["ALL"],
        "cap_add": list(LAUNCH_CAPS),
        "security_opt": ["no-new-privileges"],
        "privileged": False,
        "ipc_mode": "private",
        "pids_limit": lim.pids,
        "mem_limit": f"{lim.memory_mib}m",
        "memswap_limit": f"{lim.memory_mib}m",
        "nano_cpus": int(lim.cpus * 1e9),
        "ulimits": [
            Ulimit(name="core", soft=0, hard=0),
            Ulimit(name="nofile", soft=4096, hard=4096),
            Ulimit(name="fsize", soft=lim.file_size_bytes, hard=lim.file_size_bytes),
        ],
        "init": True,
        "log_config": LogConfig(type=LogConfig.types.NONE),
        # Open stdin, closed by the daemon when the host's one attach goes: docker-py sets
        # StdinOnce only for a non-detached config (the Attach* flags it adds are the CLI's
        # and change nothing for create/start). The judge's tether
        # (sandbox.judge.main.tether) then ends the container.
        "stdin_open": True,
        "tty": False,
        "detach": False,
        **gpu_options(gpu, gids),
    }
