"""GPU ids: one rule for which GPUs a sandbox gets, shared by every backend.

The rule (:func:`resolve_gpu_ids`):

* ``cpu``: no GPU; naming one is a :class:`UsageError` (``bad_gpu_id``).
* explicit ids are host ids, validated the same way on every backend: NVIDIA indices,
  ``GPU-<uuid>`` or ``MIG-<...>``; ROCm indices or ``renderD<N>``. Wildcards (``all``,
  ``0,1``, ``-1``) and duplicates are refused: a sandbox never gets "every GPU" by accident.
* no ids: the **first GPU visible to the kgrader process** -- the first entry of
  ``CUDA_VISIBLE_DEVICES`` (ROCm: ``HIP_VISIBLE_DEVICES``, then ``ROCR_VISIBLE_DEVICES``),
  or GPU 0 when the variable is unset. A worker pinned to one GPU (Ray, a scheduler, a
  shell that exports the variable) therefore grades on its own GPU even when the caller
  forgot ``gpu_ids``, and a worker that was given no GPU (the variable set but empty) gets
  a :class:`UsageError` (``no_gpu_ids``) instead of silently sharing GPU 0. The choice is
  recorded: ``GpuEnforcement.defaulted`` is true in the report.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from grader.errors import SandboxUnavailableError, UsageError
from sandbox.contract.wire import Device

NVIDIA_ID = re.compile(r"^(\d+|GPU-[0-9a-fA-F-]+|MIG-[0-9a-zA-Z/-]+)$")
RENDER_NODE = re.compile(r"^(?:/dev/dri/)?renderD(\d+)$")
ROCM_ID = re.compile(r"^(\d+|(?:/dev/dri/)?renderD\d+)$")
KFD_TOPOLOGY = Path("/sys/class/kfd/kfd/topology/nodes")
NVIDIA_CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
DEVICE_GIDS_ENV = "KGRADER_DEVICE_GIDS"
_VISIBLE_ENV: dict[str, tuple[str, ...]] = {
    "cuda": ("CUDA_VISIBLE_DEVICES",),
    "rocm": ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"),
}


@dataclass(frozen=True)
class GpuSelection:
    """The GPUs one sandbox gets."""

    device: Device
    ids: tuple[str, ...]
    defaulted: bool


def first_visible_gpu(device: Device, environ: dict[str, str] | None = None) -> str:
    """The first GPU id visible to this process (see the module docstring)."""
    env = os.environ if environ is None else environ
    for var in _VISIBLE_ENV.get(device, ()):
        if var in env:
            entries = [e.strip() for e in env[var].split(",") if e.strip()]
            if not entries or entries[0] in ("-1", "NoDevFiles", "void", "none"):
                raise UsageError(
                    f"no GPU is visible to this process ({var}={env[var]!r}) and no gpu_ids "
                    "were given",
                    code="no_gpu_ids",
                    hint="pass --gpu ID, or give this worker a GPU",
                )
            return entries[0]
    return "0"


def resolve_gpu_ids(
    device: Device, gpu_ids: tuple[str, ...], environ: dict[str, str] | None = None
) -> GpuSelection:
    """Validate explicit ids or pick the default one; identical on every backend."""
    if device == "cpu":
        if gpu_ids:
            raise UsageError(f"GPU ids {list(gpu_ids)} given for device cpu", code="bad_gpu_id")
        return GpuSelection("cpu", (), False)
    defaulted = not gpu_ids
    ids = (first_visible_gpu(device, environ),) if defaulted else tuple(gpu_ids)
    pattern = NVIDIA_ID if device == "cuda" else ROCM_ID
    bad = [g for g in ids if not pattern.match(g)]
    if bad:
        kind = "an NVIDIA GPU index, GPU-<uuid> or MIG-<id>" if device == "cuda" else (
            "a ROCm GPU index or renderD<N>")
        raise UsageError(f"not {kind}: {bad}", code="bad_gpu_id")
    if len(set(ids)) != len(ids):
        raise UsageError(f"GPU ids repeat: {list(ids)}", code="bad_gpu_id")
    if device == "rocm":
        ids = resolve_rocm_ids(ids)
    return GpuSelection(device, ids, defaulted)


def _kfd_render_minors(topology: Path = KFD_TOPOLOGY) -> list[int]:
    """Render minors of the KFD nodes that have one, in node order (HIP's numbering)."""
    nodes = sorted(topology.iterdir(), key=lambda p: int(p.name)) if topology.is_dir() else []
    minors: list[int] = []
    for node in nodes:
        props = dict(
            line.split(None, 1) for line in (node / "properties").read_text().splitlines() if line
        )
        minor = int(props.get("drm_render_minor", "0"))
        if minor > 0:
            minors.append(minor)
    return minors


def resolve_rocm_ids(gpu_ids: tuple[str, ...], topology: Path = KFD_TOPOLOGY) -> tuple[str, ...]:
    """Map ROCm indices ("0", "1") to ``renderD<N>`` via the KFD topology; keep render nodes."""
    if all(RENDER_NODE.match(g) for g in gpu_ids):
        return tuple(f"renderD{RENDER_NODE.match(g).group(1)}" for g in gpu_ids)  # type: ignore[union-attr]
    minors = _kfd_render_minors(topology)
    out = []
    for gid in gpu_ids:
        match = RENDER_NODE.match(gid)
        if match:
            out.append(f"renderD{match.group(1)}")
        elif gid.isdigit() and int(gid) < len(minors):
            out.append(f"renderD{minors[int(gid)]}")
        else:
            raise UsageError(f"no ROCm GPU {gid!r} (have {len(minors)})", code="bad_gpu_id")
    return tuple(out)


TABLE_TTL_S = 60.0
_table_cache: tuple[float, dict[str, tuple[int, str]]] | None = None


def _nvidia_table() -> dict[str, tuple[int, str]]:
    """``{index or uuid: (device minor, uuid)}`` from nvidia-smi; empty when it is not there.

    Kept for :data:`TABLE_TTL_S`: every GPU sandbox asks twice (its device nodes, then its
    ``CUDA_VISIBLE_DEVICES``), and a pool or a service starts one after another, while a
    GPU's index, UUID and minor change only with the driver. An empty answer is not kept."""
    global _table_cache
    now = time.monotonic()
    if _table_cache is not None and now - _table_cache[0] < TABLE_TTL_S:
        return dict(_table_cache[1])
    table = _nvidia_query()
    _table_cache = (now, dict(table)) if table else None
    return table


def _nvidia_query() -> dict[str, tuple[int, str]]:
    exe = shutil.which("nvidia-smi")
    table: dict[str, tuple[int, str]] = {}
    if exe is None:
        return table
    with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
        out = subprocess.run(
            [exe, "--query-gpu=index,uuid,minor_number", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=15, check=True,
        ).stdout
        for line in out.splitlines():
            index, uuid, minor = (p.strip() for p in line.split(","))
            table[index] = table[uuid] = (int(minor), uuid)
    return table


def _nvidia_minors() -> dict[str, int]:
    """``{index or uuid: device minor}`` from nvidia-smi; empty when it is not there."""
    return {k: minor for k, (minor, _) in _nvidia_table().items()}


def cuda_visible_devices(selection: GpuSelection) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a sandbox that binds only the selected GPUs' nodes.

    By UUID: CUDA inside such a sandbox enumerates only the GPUs whose nodes it can open,
    so a host index names another GPU or none (seen on a two-H200 host: ``--gpu 1`` made
    ``CUDA_VISIBLE_DEVICES=1`` in a sandbox holding only ``/dev/nvidia1``, and CUDA found
    no GPU). Without nvidia-smi, the selected GPUs are the sandbox's first ones, in order.
    """
    table = _nvidia_table()
    out = []
    for i, gid in enumerate(selection.ids):
        if gid.startswith(("GPU-", "MIG-")):
            out.append(gid)
        elif gid in table:
            out.append(table[gid][1])
        else:
            out.append(str(i))
    return ",".join(out)


def device_nodes(selection: GpuSelection) -> list[str]:
    """Host device nodes that expose exactly ``selection`` (for backends that bind nodes).

    Raises :class:`SandboxUnavailableError` when a selected GPU has no node here.
    """
    if selection.device == "cpu":
        return []
    if selection.device == "rocm":
        nodes = ["/dev/kfd", *(f"/dev/dri/{g}" for g in selection.ids)]
    else:
        minors = _nvidia_minors()
        nodes = [f"/dev/{n}" for n in NVIDIA_CONTROL_NODES if Path(f"/dev/{n}").exists()]
        for gid in selection.ids:
            if gid.startswith("MIG-"):
                raise UsageError("MIG devices need the docker backend", code="bad_gpu_id")
            minor = minors.get(gid, int(gid) if gid.isdigit() else None)
            if minor is None:
                raise UsageError(f"cannot map GPU {gid} to a device node (nvidia-smi "
                                 "missing?); pass its index", code="bad_gpu_id")
            nodes.append(f"/dev/nvidia{minor}")
        if Path("/dev/nvidia-caps").is_dir():
            nodes.append("/dev/nvidia-caps")
    missing = [n for n in nodes if not Path(n).exists()]
    if missing:
        raise SandboxUnavailableError(f"GPU device nodes missing: {missing}",
                                      hint="is the GPU driver loaded? check --gpu")
    return nodes


def device_gids(nodes: list[str]) -> tuple[int, ...]:
    """Groups the runner uids need to open ``nodes`` (those not world read-write).

    Raises :class:`SandboxUnavailableError` for a node only root's group may open: no
    supplementary group could give an unprivileged runner access to it.
    """
    gids: set[int] = set()
    for node in nodes:
        try:
            st = os.stat(node)
        except OSError as exc:
            raise SandboxUnavailableError(f"cannot stat GPU node {node}: {exc}") from None
        if not stat.S_ISCHR(st.st_mode) or st.st_mode & 0o006 == 0o006:
            continue
        if st.st_gid == 0 or st.st_mode & 0o060 != 0o060:
            raise SandboxUnavailableError(
                f"runner uids cannot open {node} (mode {stat.filemode(st.st_mode)}, "
                f"gid {st.st_gid})",
                hint="make the node world read-write or group read-write by a non-root group "
                "(udev rule)",
            )
        gids.add(st.st_gid)
    return tuple(sorted(gids))
