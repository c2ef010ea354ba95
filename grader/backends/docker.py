"""The docker backend: one fresh, locked-down container per run.

The launch is a flat list of steps (``run``): check the image is local, prepare
``/kg/out``, create the container from :func:`container_kwargs` (a pure function, unit
tested without a daemon), attach capped readers to stdout/stderr, start, wait up to the
wall limit while a watcher samples the container's ``pids.events``, kill on timeout or on
a fork bomb, read the final state (exit status, OOM), remove the container.

What each limit is enforced by (also returned in ``SandboxOutcome.enforcement``):

* network: ``network_mode="none"`` (only ``lo``);
* privileges: uid/gid 65534, ``cap_drop=ALL``, ``no-new-privileges``, default seccomp;
* filesystem: read-only root, ``/kg/in`` and the harness read-only, ``/tmp`` a size-capped
  tmpfs; ``RLIMIT_FSIZE`` caps any single file (``/kg/out`` is on the host's disk);
* memory, pids, CPU: the container's cgroup (memory == memory+swap, so no swap);
* wall time: the host kills the whole container (``docker kill``), never just one pid;
* output: docker's log driver is off (nothing on the host's disk); stdout and stderr
  are read from an attach stream up to ``limits.output_bytes`` and then disconnected.

A process can exit with a status above 128 on its own; docker cannot tell that apart from
death by a signal (the init process reports both the same way), so a status 128+N is
reported as signal N.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import re
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

import docker
import docker.errors
import psutil
import requests.exceptions
import structlog
from docker.models.containers import Container
from docker.types import DeviceRequest, LogConfig, Mount, Ulimit

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
from grader.errors import ImageMissingError, SandboxUnavailableError, UsageError
from grader.limits import LimitName

LABEL = "kgrader"
LABEL_RUN = "kgrader.label"
LABEL_OWNER = "kgrader.owner"
MIB = 1 << 20
HOST_HARNESS = Path(__file__).resolve().parents[2] / "sandbox"
_NVIDIA_ID = re.compile(r"^(\d+|GPU-[0-9a-fA-F-]+|MIG-[0-9a-zA-Z/-]+)$")
_RENDER_NODE = re.compile(r"^(?:/dev/dri/)?renderD(\d+)$")
_PROXY_VAR = re.compile(r"(?i)^(all|https?|ftp|no|socks)_proxy$")
_START_HINT = (
    "start it as root with scripts/docker-setup.sh, or "
    "`dockerd --bridge=none --iptables=false &` (or `systemctl start docker`)"
)
PIDS_POLL_S = 0.1

log = structlog.get_logger("kgrader.docker")


def default_image(device: Device) -> str:
    """The image the backend uses for ``device`` unless told otherwise."""
    return {"cuda": "kgrader/cuda:latest", "rocm": "kgrader/rocm:latest"}.get(
        device, "kgrader/cpu:latest"
    )


def build_command(image: str, device: Device) -> str:
    """The exact command that builds ``image`` for ``device``."""
    flavor = device
    cmd = f"kgrader image build --flavor {flavor}"
    if image != default_image(device):
        cmd += f" --tag {image}"
    if device == "cpu":
        cmd += " --base kgrader/base:bookworm --wheels /var/cache/kgrader/wheels"
        cmd += "  (or, as root: scripts/docker-setup.sh, which also makes the base and wheels)"
    return cmd


def _gpu_options(spec: SandboxSpec) -> dict[str, Any]:
    """Device options: explicit NVIDIA ids, or /dev/kfd plus the named render nodes."""
    if spec.device == "cpu":
        return {}
    if not spec.gpu_ids:
        raise UsageError(f"device {spec.device} needs explicit gpu_ids", code="no_gpu_ids")
    if spec.device == "cuda":
        bad = [g for g in spec.gpu_ids if not _NVIDIA_ID.match(g)]
        if bad:
            raise UsageError(f"not an NVIDIA GPU index or UUID: {bad}", code="bad_gpu_id")
        request = DeviceRequest(
            driver="nvidia", device_ids=list(spec.gpu_ids), capabilities=[["gpu"]]
        )
        return {"device_requests": [request]}
    nodes = []
    for gid in spec.gpu_ids:
        match = _RENDER_NODE.match(gid)
        if match is None:
            raise UsageError(f"not a render node (renderD<N>): {gid!r}", code="bad_gpu_id")
        node = f"/dev/dri/renderD{match.group(1)}"
        nodes.append(node)
    nodes = ["/dev/kfd", *nodes]
    return {"devices": [f"{n}:{n}:rw" for n in nodes], "group_add": _device_groups(nodes)}


def _device_groups(nodes: list[str]) -> list[str]:
    """Host gids owning the device nodes (video, render), so uid 65534 may open them."""
    gids = set()
    for path in nodes:
        with contextlib.suppress(OSError):
            gids.add(str(os.stat(path).st_gid))
    return sorted(gids - {"0"})


def _environment(spec: SandboxSpec) -> dict[str, str]:
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
    return env


def container_kwargs(
    spec: SandboxSpec, image: str, *, harness_dir: Path = HOST_HARNESS, name: str | None = None
) -> dict[str, Any]:
    """Arguments for ``client.containers.create`` that run ``spec`` locked down.

    Pure: reads nothing from the daemon or the filesystem (ROCm group ids aside), so
    every security-relevant choice is unit-testable.
    """
    lim = spec.limits
    tmpfs_bytes = lim.tmpfs_mib * MIB
    fsize = max(tmpfs_bytes, lim.result_bytes)
    return {
        "image": image,
        "name": name,
        "entrypoint": list(spec.argv[:1]),
        "command": list(spec.argv[1:]),
        "environment": _environment(spec),
        "user": f"{SANDBOX_UID}:{SANDBOX_GID}",
        "working_dir": SCRATCH_MOUNT,
        "labels": {LABEL: "1", LABEL_RUN: spec.label, LABEL_OWNER: _OWNER},
        "network_mode": "none",
        "read_only": True,
        "mounts": [
            Mount(f"{HARNESS_MOUNT}/sandbox", str(harness_dir), type="bind", read_only=True),
            Mount(IN_MOUNT, str(spec.in_dir), type="bind", read_only=True),
            Mount(OUT_MOUNT, str(spec.out_dir), type="bind", read_only=False),
        ],
        # exec: Triton and load_inline dlopen the .so files they build under HOME=/tmp.
        "tmpfs": {SCRATCH_MOUNT: f"rw,exec,nosuid,nodev,size={lim.tmpfs_mib}m,mode=1777"},
        "shm_size": f"{lim.tmpfs_mib}m",
        "cap_drop": ["ALL"],
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
            Ulimit(name="fsize", soft=fsize, hard=fsize),
        ],
        "init": True,
        "log_config": LogConfig(type=LogConfig.types.NONE),
        "stdin_open": False,
        "tty": False,
        "detach": True,
        **_gpu_options(spec),
    }


def resolve_rocm_ids(gpu_ids: tuple[str, ...]) -> tuple[str, ...]:
    """Map ROCm GPU indices ("0", "1") to render nodes via the KFD topology.

    Index i is the i-th KFD node that has a render minor, in node order (as HIP numbers
    devices); explicit ``renderD<N>`` ids are kept as they are.
    """
    if all(_RENDER_NODE.match(g) for g in gpu_ids):
        return gpu_ids
    minors: list[int] = []
    topo = Path("/sys/class/kfd/kfd/topology/nodes")
    nodes = sorted(topo.iterdir(), key=lambda p: int(p.name)) if topo.is_dir() else []
    for node in nodes:
        props = dict(
            line.split(None, 1) for line in (node / "properties").read_text().splitlines() if line
        )
        minor = int(props.get("drm_render_minor", "0"))
        if minor > 0:
            minors.append(minor)
    out = []
    for gid in gpu_ids:
        if _RENDER_NODE.match(gid):
            out.append(gid)
        elif gid.isdigit() and int(gid) < len(minors):
            out.append(f"renderD{minors[int(gid)]}")
        else:
            raise UsageError(f"no ROCm GPU {gid!r} (have {len(minors)})", code="bad_gpu_id")
    return tuple(out)


# --------------------------------------------------------------------------- live runs


def _owner_of(pid: int) -> str:
    """``host:pid:start-time``: names a process unambiguously (pids get reused)."""
    try:
        started = f"{psutil.Process(pid).create_time():.2f}"
    except psutil.Error:
        started = "?"
    return f"{socket.gethostname()}:{pid}:{started}"


_OWNER = _owner_of(os.getpid())


def owner_alive(owner: str | None) -> bool:
    """Whether the process named by a ``kgrader.owner`` label still runs on this host."""
    if not owner or owner.count(":") < 2:
        return False
    host, pid, _ = owner.rsplit(":", 2)
    return host == socket.gethostname() and pid.isdigit() and _owner_of(int(pid)) == owner


_live: set[str] = set()
_live_lock = threading.Lock()


def _remove_live_containers() -> None:
    """atexit backstop: remove containers of runs that never reached their ``finally``."""
    with _live_lock:
        ids = list(_live)
    if not ids:
        return
    with contextlib.suppress(docker.errors.DockerException):
        client = docker.from_env()
        for cid in ids:
            with contextlib.suppress(docker.errors.DockerException):
                client.api.remove_container(cid, force=True)


atexit.register(_remove_live_containers)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into ``SystemExit(143)`` for the run, so ``finally`` removes the container.

    Only when we are the main thread and nobody else handles SIGTERM already.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _CappedReader(threading.Thread):
    """Reads one attach stream until EOF or ``cap`` bytes, then disconnects it.

    With the log driver off, a disconnected stream drops the rest of the output without
    blocking the container, so a flood costs the host nothing after the cap.
    """

    def __init__(self, stream: Any, cap: int) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.cap = cap
        self.data = bytearray()
        self.truncated = False

    def run(self) -> None:
        try:
            for chunk in self.stream:
                room = self.cap - len(self.data)
                self.data += chunk[:room]
                if len(chunk) > room:
                    self.truncated = True
                    break
        except (OSError, ValueError, requests.exceptions.RequestException):
            pass
        finally:
            with contextlib.suppress(Exception):
                self.stream.close()


class _PidsWatcher(threading.Thread):
    """Samples the container's ``pids.events``; kills the container at the first hit.

    A fork bomb otherwise spins against the pids limit until the wall limit, which can be
    many minutes. The cgroup disappears when the container exits, so it is sampled live.
    """

    def __init__(self, container: Container, cgroup_file: Path | None) -> None:
        super().__init__(daemon=True)
        self.container = container
        self.cgroup_file = cgroup_file
        self.stop = threading.Event()
        self.hit = False

    def run(self) -> None:
        if self.cgroup_file is None:
            return
        while not self.stop.wait(PIDS_POLL_S):
            try:
                text = self.cgroup_file.read_text()
            except OSError:
                continue
            if any(line.split()[1] != "0" for line in text.splitlines() if line.strip()):
                self.hit = True
                with contextlib.suppress(docker.errors.DockerException):
                    self.container.kill()
                return


def _pids_events_file(container_id: str) -> Path | None:
    """The host path of the container's ``pids.events`` (cgroup v1/v2, cgroupfs/systemd)."""
    root = Path("/sys/fs/cgroup")
    for rel in (
        f"pids/docker/{container_id}",
        f"pids/system.slice/docker-{container_id}.scope",
        f"docker/{container_id}",
        f"system.slice/docker-{container_id}.scope",
    ):
        candidate = root / rel / "pids.events"
        if candidate.is_file():
            return candidate
    return None


def _split_budget(out: bytes, err: bytes, cap: int) -> tuple[bytes, bytes]:
    """Trim stdout+stderr to ``cap`` bytes in total, leaving each at least half if needed."""
    if len(out) + len(err) <= cap:
        return out, err
    half = cap // 2
    if len(err) <= half:
        return out[: cap - len(err)], err
    if len(out) <= half:
        return out, err[: cap - len(out)]
    return out[:half], err[: cap - half]


@dataclass
class _RunState:
    timed_out: bool = False
    status: int | None = None
    oom: bool = False
    wall_s: float = 0.0


class DockerBackend(SandboxBackend):
    """Runs each sandbox as a fresh docker container; never pulls images."""

    name = "docker"

    def __init__(self, image: str | None = None, *, harness_dir: Path = HOST_HARNESS) -> None:
        """``image``: the image to run; ``None`` picks :func:`default_image` per device."""
        self.image = image
        self.harness_dir = harness_dir
        self._client: docker.DockerClient | None = None

    # ------------------------------------------------------------------ availability
    def _docker(self) -> docker.DockerClient:
        if self._client is None:
            try:
                client = docker.from_env()
                client.ping()
            except docker.errors.DockerException as exc:
                raise SandboxUnavailableError(
                    f"cannot reach dockerd: {exc}", hint=_START_HINT
                ) from exc
            self._client = client
        return self._client

    def image_for(self, device: Device) -> str:
        """The image a run on ``device`` uses."""
        return self.image or default_image(device)

    def check_available(self, device: Device) -> None:
        """Daemon reachable, image local, harness present, GPU plumbing where needed."""
        client = self._docker()
        self._require_image(client, device)
        if not self.harness_dir.is_dir():
            raise SandboxUnavailableError(f"harness package not found at {self.harness_dir}")
        if device == "cuda":
            runtimes = client.info().get("Runtimes", {}) or {}
            if "nvidia" not in runtimes and not _which("nvidia-container-runtime-hook"):
                raise SandboxUnavailableError(
                    "dockerd cannot expose NVIDIA GPUs",
                    hint="install nvidia-container-toolkit and restart dockerd",
                )
        if device == "rocm" and not Path("/dev/kfd").exists():
            raise SandboxUnavailableError("no /dev/kfd: the ROCm kernel driver is not loaded")

    def _require_image(self, client: docker.DockerClient, device: Device) -> str:
        image = self.image_for(device)
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound as exc:
            raise ImageMissingError(
                f"docker image {image} is not present (kgrader never pulls)",
                hint=f"build it: {build_command(image, device)}",
            ) from exc
        except docker.errors.DockerException as exc:
            raise SandboxUnavailableError(f"dockerd failed: {exc}", hint=_START_HINT) from exc
        return image

    def python(self) -> str:
        """``python3`` on the image's PATH (the venv when the image has one)."""
        return "python3"

    # ------------------------------------------------------------------ run
    def run(self, spec: SandboxSpec) -> SandboxOutcome:
        """Run ``spec`` in a fresh container and always remove it afterwards."""
        client = self._docker()
        image = self._require_image(client, spec.device)
        if spec.device == "rocm":
            spec = replace(spec, gpu_ids=resolve_rocm_ids(spec.gpu_ids))
        _prepare_out_dir(spec.out_dir)
        name = f"kgrader-{_slug(spec.label)}-{uuid.uuid4().hex[:8]}"
        kwargs = container_kwargs(spec, image, harness_dir=self.harness_dir, name=name)
        container: Container | None = None
        with _sigterm_raises():
            try:
                container = client.containers.create(**kwargs)
                with _live_lock:
                    _live.add(container.id)
                log.info("docker.created", id=container.short_id, image=image, label=spec.label)
                return self._supervise(client, container, spec)
            except docker.errors.ImageNotFound as exc:
                raise ImageMissingError(
                    f"docker image {image} disappeared",
                    hint=f"build it: {build_command(image, spec.device)}",
                ) from exc
            except docker.errors.APIError as exc:
                raise SandboxUnavailableError(f"dockerd refused the container: {exc}") from exc
            finally:
                if container is not None:
                    _remove(container)

    def _supervise(
        self, client: docker.DockerClient, container: Container, spec: SandboxSpec
    ) -> SandboxOutcome:
        cap = spec.limits.output_bytes
        readers = [
            _CappedReader(
                client.api.attach(
                    container.id, stdout=out, stderr=not out, stream=True, logs=False
                ),
                cap,
            )
            for out in (True, False)
        ]
        for reader in readers:
            reader.start()
        state = _RunState()
        started = time.monotonic()
        container.start()
        watcher = _PidsWatcher(container, _pids_events_file(str(container.id)))
        watcher.start()
        try:
            state.status = self._wait(container, spec.limits.wall_s, state)
        finally:
            state.wall_s = time.monotonic() - started
            watcher.stop.set()
            watcher.join(timeout=2)
        for reader in readers:
            reader.join(timeout=5)
        container.reload()
        state.oom = bool(container.attrs.get("State", {}).get("OOMKilled", False))
        return self._outcome(spec, state, readers, watcher)

    @staticmethod
    def _wait(container: Container, wall_s: float, state: _RunState) -> int | None:
        started = time.monotonic()
        try:
            result = container.wait(timeout=wall_s)
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as exc:
            if time.monotonic() - started < wall_s - 1.0:
                raise SandboxUnavailableError(f"lost dockerd while waiting: {exc}") from exc
            # A read timeout on wait kills nothing: kill the whole container explicitly.
            state.timed_out = True
            log.info("docker.timeout", id=container.short_id, wall_s=wall_s)
            with contextlib.suppress(docker.errors.NotFound):
                container.kill()
            result = container.wait(timeout=30)
        code = result.get("StatusCode")
        return int(code) if code is not None else None

    def _outcome(
        self,
        spec: SandboxSpec,
        state: _RunState,
        readers: list[_CappedReader],
        watcher: _PidsWatcher,
    ) -> SandboxOutcome:
        out, err = _split_budget(
            bytes(readers[0].data), bytes(readers[1].data), spec.limits.output_bytes
        )
        truncated = readers[0].truncated or readers[1].truncated
        truncated = truncated or len(out) + len(err) < len(readers[0].data) + len(readers[1].data)
        exit_code, sig = _decode_status(state.status)
        fired: LimitName | None = None
        if state.oom:
            fired = "memory_limit"
        elif watcher.hit:
            fired = "pids_limit"
        elif state.timed_out:
            fired = "timeout"
        elif sig == signal.SIGXFSZ:
            fired = "disk_limit"
        outcome = SandboxOutcome(
            backend=self.name,
            exit_code=exit_code,
            signal=sig,
            wall_s=round(state.wall_s, 3),
            stdout=out,
            stderr=err,
            timed_out=state.timed_out,
            oom_killed=state.oom,
            pids_limited=watcher.hit,
            output_truncated=truncated,
            limit_fired=fired,
            enforcement=_enforcement(spec, watcher.cgroup_file is not None),
        )
        log.info(
            "docker.finished",
            label=spec.label,
            exit_code=exit_code,
            signal=sig,
            wall_s=outcome.wall_s,
            limit_fired=fired,
            output_truncated=truncated,
        )
        return outcome

    def cleanup(self, *, include_live: bool = False) -> int:
        """Remove containers labelled ``kgrader=1``; return how many were removed.

        By default a container whose owner (the host process that started it, per its
        ``kgrader.owner`` label) still runs on this host is kept: it belongs to an
        evaluation in progress. ``include_live=True`` removes those too.
        """
        client = self._docker()
        removed = kept = 0
        for container in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
            if not include_live and owner_alive(container.labels.get(LABEL_OWNER)):
                kept += 1
            elif _remove(container):
                removed += 1
        log.info("docker.cleanup", removed=removed, kept_live=kept)
        return removed


def _decode_status(status: int | None) -> tuple[int | None, int | None]:
    """(exit_code, signal): a status of 128+N (N a signal number) means signal N."""
    if status is not None and 128 < status <= 128 + 64:
        return None, status - 128
    return status, None


def _enforcement(spec: SandboxSpec, pids_visible: bool) -> dict[str, str]:
    lim = spec.limits
    return {
        "network": "network_mode=none (loopback only)",
        "user": f"uid/gid {SANDBOX_UID}, cap_drop=ALL, no-new-privileges, default seccomp",
        "filesystem": "read-only root; /kg/in and harness read-only bind mounts",
        "tmpfs": f"tmpfs size={lim.tmpfs_mib}m (docker)",
        "memory": f"cgroup (docker): {lim.memory_mib} MiB, memory+swap equal",
        "pids": f"cgroup (docker): {lim.pids}"
        + ("; fork bomb killed at first pids.events hit" if pids_visible else "; not observed"),
        "cpu": f"cgroup (docker): {lim.cpus} CPUs (nano_cpus)",
        "wall": f"host kills the container after {lim.wall_s:.0f} s",
        "file_size": "RLIMIT_FSIZE (docker ulimit)",
        "output": f"attach stream capped at {lim.output_bytes} bytes; log driver none",
        "gpu": {
            "cpu": "no GPU devices",
            "cuda": "device_requests with explicit NVIDIA ids",
            "rocm": "/dev/kfd + named /dev/dri/renderD* only",
        }[spec.device],
        "gpu_memory": "not enforced by docker",
    }


def _remove(container: Container) -> bool:
    try:
        container.remove(force=True, v=True)
        removed = True
    except docker.errors.NotFound:
        removed = False
    except docker.errors.APIError as exc:
        log.warning("docker.remove_failed", id=container.short_id, error=str(exc))
        removed = False
    with _live_lock:
        _live.discard(str(container.id))
    return removed


def _prepare_out_dir(out_dir: Path) -> None:
    """Create ``/kg/out``'s host side (a real directory) writable by the sandbox user."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if out_dir.is_symlink() or not out_dir.is_dir():
        raise UsageError(f"out_dir is not a plain directory: {out_dir}", code="bad_out_dir")
    if os.geteuid() == 0:
        os.chown(out_dir, SANDBOX_UID, SANDBOX_GID)
        out_dir.chmod(0o700)
    else:
        # Without root we cannot chown; the evaluation folder's parents keep others out.
        out_dir.chmod(0o777)


def _slug(label: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", label)[:40].strip("-.") or "run"


def _which(name: str) -> bool:
    return any(
        os.access(os.path.join(d, name), os.X_OK) for d in os.environ.get("PATH", "").split(":")
    )
