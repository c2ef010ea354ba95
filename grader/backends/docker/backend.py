"""The docker backend: one fresh, locked-down container per run.

The launch is a flat list of steps (:meth:`DockerBackend.run`): check the image is local,
resolve the GPU ids, prepare ``/kg/out``, create the container from
:func:`~grader.backends.docker.config.container_kwargs`, attach drains to
stdout/stderr, start, wait up to the wall limit while a watcher samples ``pids.events``,
kill on timeout or on a fork bomb, read the final state (exit status, OOM), classify the
end (:mod:`grader.backends.classify`), remove the container.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import replace
from pathlib import Path

import docker
import docker.errors
import requests.exceptions
import structlog
from docker.models.containers import Container

from grader.backends.base import (
    LAUNCH_CAPS,
    Device,
    SandboxBackend,
    SandboxOutcome,
    SandboxSpec,
    prepare_out_dir,
)
from grader.backends.classify import classify, decode_status
from grader.backends.docker import cleanup, prereqs
from grader.backends.docker.config import (
    HOST_HARNESS,
    SCRATCH_OPTIONS,
    SHM_OPTIONS,
    container_kwargs,
    gpu_node_gids,
)
from grader.backends.docker.images import build_command, default_image
from grader.backends.docker.prereqs import START_HINT
from grader.backends.docker.supervise import Watched, supervise
from grader.backends.enforcement import (
    DiskEnforcement,
    Enforcement,
    GpuEnforcement,
    ScratchMount,
)
from grader.backends.gate import MAX_WAIT_FACTOR
from grader.backends.gpu import GpuSelection, resolve_gpu_ids
from grader.backends.output import collect
from grader.backends.registry import sandbox_backend
from grader.errors import ImageMissingError, SandboxUnavailableError

log = structlog.get_logger("kgrader.docker")


def require_image(c: docker.DockerClient, image: str, device: Device) -> str:
    """``image`` if it is present locally (kgrader never pulls), else :class:`ImageMissingError`."""
    try:
        c.images.get(image)
    except docker.errors.ImageNotFound as exc:
        raise ImageMissingError(
            f"docker image {image} is not present (kgrader never pulls)",
            hint=f"build it: {build_command(image, device)}",
        ) from exc
    except docker.errors.DockerException as exc:
        raise SandboxUnavailableError(f"dockerd failed: {exc}", hint=START_HINT) from exc
    return image


def check_available(c: docker.DockerClient, image: str | None, device: Device,
                    harness_dir: Path) -> None:
    """Daemon reachable, image local, harness present, GPU plumbing where needed."""
    require_image(c, image or default_image(device), device)
    if not harness_dir.is_dir():
        raise SandboxUnavailableError(f"harness package not found at {harness_dir}")
    if device == "cuda":
        runtimes = c.info().get("Runtimes", {}) or {}
        if "nvidia" not in runtimes and not _which("nvidia-container-runtime-hook"):
            raise SandboxUnavailableError(
                "dockerd cannot expose NVIDIA GPUs",
                hint="install nvidia-container-toolkit and restart dockerd",
            )
    if device == "rocm" and not Path("/dev/kfd").exists():
        raise SandboxUnavailableError("no /dev/kfd: the ROCm kernel driver is not loaded")


def _which(name: str) -> bool:
    return any(
        os.access(os.path.join(d, name), os.X_OK) for d in os.environ.get("PATH", "").split(":")
    )


@sandbox_backend("docker")
class DockerBackend(SandboxBackend):
    """Runs each sandbox as a fresh docker container; never pulls images."""

    name = "docker"

    def __init__(self, image: str | None = None, *, harness_dir: Path = HOST_HARNESS) -> None:
        """``image``: the image to run; ``None`` picks the default image per device."""
        self.image = image
        self.harness_dir = harness_dir

    def image_for(self, device: Device) -> str:
        """The image a run on ``device`` uses."""
        return self.image or default_image(device)

    def check_available(self, device: Device) -> None:
        """Daemon reachable, image local, harness present, GPU plumbing where needed."""
        check_available(prereqs.client(), self.image, device, self.harness_dir)

    def python(self) -> str:
        """``python3`` on the image's PATH (the venv when the image has one)."""
        return "python3"

    def run(self, spec: SandboxSpec) -> SandboxOutcome:
        """Run ``spec`` in a fresh container and always remove it afterwards."""
        gpu = resolve_gpu_ids(spec.device, spec.gpu_ids)  # bad input first, on every backend
        client = prereqs.client()
        image = require_image(client, self.image_for(spec.device), spec.device)
        spec = replace(spec, gpu_ids=gpu.ids)
        prepare_out_dir(spec.out_dir)
        name = f"kgrader-{_slug(spec.label)}-{uuid.uuid4().hex[:8]}"
        kwargs = container_kwargs(spec, image, harness_dir=self.harness_dir, name=name, gpu=gpu)
        container: Container | None = None
        with cleanup.sigterm_raises():
            try:
                # A container's start is not split from its run here: a gated docker run
                # takes the device before it starts (serialised, no head start).
                wait_s = spec.limits.wall_s * MAX_WAIT_FACTOR
                if spec.gate is not None and spec.gate.wait(lambda: True, wait_s) is None:
                    raise SandboxUnavailableError(f"the device stayed busy past {wait_s:.0f} s")
                container = client.containers.create(**kwargs)
                cleanup.track(container)
                log.info("docker.created", id=container.short_id, image=image, label=spec.label)
                watched = supervise(client, container, spec.limits.wall_s,
                                    spec.limits.output_bytes, spec.cancel)
            except docker.errors.ImageNotFound as exc:
                raise ImageMissingError(
                    f"docker image {image} disappeared",
                    hint=f"build it: {build_command(image, spec.device)}",
                ) from exc
            except docker.errors.APIError as exc:
                raise SandboxUnavailableError(f"dockerd refused the container: {exc}") from exc
            except requests.exceptions.RequestException as exc:  # the daemon went away
                raise SandboxUnavailableError(f"lost dockerd: {exc}", hint=START_HINT) from exc
            finally:
                if container is not None:
                    cleanup.remove(container)
                if spec.gate is not None:
                    spec.gate.release()
        return self._outcome(spec, watched, gpu)

    def _outcome(self, spec: SandboxSpec, w: Watched, gpu: GpuSelection) -> SandboxOutcome:
        out, err, truncated = collect(w.stdout, w.stderr, spec.limits.output_bytes)
        exit_code, sig = decode_status(w.status)
        fired = classify(w.evidence)
        outcome = SandboxOutcome(
            backend=self.name, exit_code=exit_code, signal=sig, wall_s=w.wall_s,
            stdout=out, stderr=err, timed_out=w.evidence.timed_out,
            oom_killed=w.evidence.oom_killed, pids_limited=w.evidence.pids_limited,
            output_truncated=truncated, limit_fired=fired, oom_counted=w.evidence.oom_counted,
            enforcement=enforcement(spec, w.pids_visible, gpu),
        )
        log.info("docker.finished", label=spec.label, exit_code=exit_code, signal=sig,
                 wall_s=outcome.wall_s, limit_fired=fired, output_truncated=truncated)
        return outcome

    def cleanup(self, *, include_live: bool = False) -> int:
        """Remove containers labelled ``kgrader=1``; return how many were removed.

        A container whose owner (the host process that started it) still runs on this
        host is kept unless ``include_live``.
        """
        removed, _ = cleanup.reclaim_containers(prereqs.client(), include_live=include_live)
        return len(removed)


def enforcement(spec: SandboxSpec, pids_visible: bool, gpu: GpuSelection) -> Enforcement:
    """What the container's configuration enforced (see :mod:`.config`)."""
    lim = spec.limits
    caps = ", ".join(f"CAP_{c}" for c in LAUNCH_CAPS)
    scratch = tuple(
        ScratchMount(path=path, size_bytes=lim.tmpfs_mib << 20, inodes=lim.tmpfs_inodes,
                     options=opts)
        for path, opts in (("/tmp", SCRATCH_OPTIONS), ("/dev/shm", SHM_OPTIONS))
    )
    return Enforcement(
        backend="docker",
        memory=f"cgroup (docker): {lim.memory_mib} MiB, memory+swap equal",
        pids=f"cgroup (docker): pids_limit={lim.pids}"
        + ("; container killed at the first refused fork" if pids_visible
           else "; refused forks not observed (pids.events not found)"),
        cpu=f"cgroup (docker): {lim.cpus} CPUs (nano_cpus)",
        wall=f"host kills the whole container after {lim.wall_s:.0f} s",
        disk=DiskEnforcement(
            mechanism="tmpfs mounts of the container (docker --tmpfs)",
            scratch=scratch, file_size_bytes=lim.file_size_bytes,
            out_dir="host disk; uid 65534 mode 0700 (only the judge's uid may write); "
                    "RLIMIT_FSIZE per file",
            read_only="read-only container root; /kg/in and the harness read-only binds"),
        output=f"both attach streams drained to the end; {lim.output_bytes} bytes kept in "
               "total; log driver none",
        user=f"uid 0 in the container with {caps} only (effective, permitted, bounding; "
             "cap_drop=ALL), no-new-privileges",
        network="network_mode=none (loopback only)",
        seccomp="docker default profile",
        gpu=GpuEnforcement(
            device=spec.device, ids=gpu.ids, defaulted=gpu.defaulted,
            mechanism={"cpu": "none", "cuda": "device_requests with explicit NVIDIA ids",
                       "rocm": "/dev/kfd + the named /dev/dri/renderD* only"}[spec.device],
            device_gids=gpu_node_gids(gpu),
            memory="no GPU" if spec.device == "cpu" else "runner allocator cap only "
                   "(docker enforces no GPU memory limit)"),
    )


def _slug(label: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", label)[:40].strip("-.") or "run"
