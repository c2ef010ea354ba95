"""The docker backend: one fresh, locked-down container per run.

The launch is a flat list of steps (:meth:`DockerBackend.run`): check the image is local,
resolve the GPU ids, prepare ``/kg/out``, create the container from
:func:`~grader.backends.docker.config.container_kwargs`, attach drains to
stdout/stderr, start, wait up to the wall limit while a watcher samples ``pids.events``,
kill on timeout or on a fork bomb, read the final state (exit status, OOM), classify the
end (:mod:`grader.backends.classify`), remove the container.

The class also owns the lifecycle of its containers (kill this process's on a stop,
reclaim a dead owner's, the start-up sweep), the peaks cache's fingerprint (the image)
and what a lost record means on docker (:meth:`DockerBackend.ended_by`). This module loads
without the docker SDK: the modules that import it (:mod:`.prereqs`, :mod:`.cleanup`,
:mod:`.supervise`) are imported where a container is checked, run or looked for, so the
registry reaches these methods at no cost where no container ever ran.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import sys
import threading
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.backends.base import (
    LAUNCH_CAPS,
    Capabilities,
    Device,
    EndedBy,
    Reclaimed,
    SandboxBackend,
    SandboxOutcome,
    SandboxSpec,
    prepare_out_dir,
)
from grader.backends.classify import classify, decode_status
from grader.backends.docker.config import (
    HOST_HARNESS,
    LABEL,
    LABEL_OWNER,
    SCRATCH_OPTIONS,
    SHM_OPTIONS,
    container_kwargs,
    gpu_node_gids,
)
from grader.backends.docker.images import build_command, default_image
from grader.backends.docker.probe import labelled_owners
from grader.backends.enforcement import (
    DiskEnforcement,
    Enforcement,
    GpuEnforcement,
    ScratchMount,
)
from grader.backends.gate import MAX_WAIT_FACTOR
from grader.backends.gpu import GpuSelection, resolve_gpu_ids
from grader.backends.output import collect
from grader.backends.owner import owner_gone
from grader.backends.registry import sandbox_backend
from grader.errors import ImageMissingError, SandboxUnavailableError
from grader.logs import get_logger
from sandbox.contract.wire import EXIT_HOST_GONE

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

    from grader.backends.docker.supervise import Watched

log = get_logger("kgrader.docker")
# What the container's init (docker's tini) prints when it could not forward a signal.
TINI_FORWARD_FAILED = b"[FATAL tini (1)] Unexpected error when forwarding signal"
SWEEP_EXIT_WAIT_S = 10.0  # a quick command still finishes the background sweep


def supervise(client: docker.DockerClient, container: Container, wall_s: float,
              output_bytes: int, cancel: threading.Event | None) -> Watched:
    """:func:`grader.backends.docker.supervise.supervise` (imported on first use)."""
    from grader.backends.docker.supervise import supervise as watch_container

    return watch_container(client, container, wall_s, output_bytes, cancel)


def require_image(c: docker.DockerClient, image: str, device: Device) -> str:
    """``image`` if it is present locally (kgrader never pulls), else :class:`ImageMissingError`."""
    import docker.errors

    from grader.backends.docker.prereqs import START_HINT

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
    capabilities = Capabilities(warm_start=False, daemon=True, devices=("cpu", "cuda", "rocm"),
                                leftovers="containers")

    def __init__(self, image: str | None = None, *, harness_dir: Path = HOST_HARNESS) -> None:
        """``image``: the image to run; ``None`` picks the default image per device."""
        self.image = image
        self.harness_dir = harness_dir

    def image_for(self, device: Device) -> str:
        """The image a run on ``device`` uses."""
        return self.image or default_image(device)

    def check_available(self, device: Device) -> None:
        """Daemon reachable, image local, harness present, GPU plumbing where needed."""
        from grader.backends.docker import prereqs

        check_available(prereqs.client(), self.image, device, self.harness_dir)

    def python(self) -> str:
        """``python3`` on the image's PATH (the venv when the image has one)."""
        return "python3"

    def run(self, spec: SandboxSpec) -> SandboxOutcome:
        """Run ``spec`` in a fresh container and always remove it afterwards."""
        import docker.errors
        import requests.exceptions

        from grader.backends.docker import cleanup, prereqs
        from grader.backends.docker.prereqs import START_HINT

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
        from grader.backends.docker import cleanup, prereqs

        removed, _ = cleanup.reclaim_containers(prereqs.client(), include_live=include_live)
        return len(removed)

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def kill_own(cls, owner: str) -> int:
        """Kill the running containers labelled with ``owner``, only when this process
        created one (the docker SDK is never imported for the answer)."""
        if not _ran_containers():
            return 0
        from grader.backends.docker.prereqs import client

        hit = 0
        with contextlib.suppress(Exception):
            flt = {"label": [f"{LABEL}=1", f"{LABEL_OWNER}={owner}"], "status": "running"}
            for c in client().containers.list(filters=flt, ignore_removed=True):
                with contextlib.suppress(Exception):
                    c.kill()
                    hit += 1
        return hit

    @classmethod
    def remove_own(cls, owner: str) -> int:
        """Remove every container labelled with ``owner`` (when this process made one)."""
        if not _ran_containers():
            return 0
        from grader.backends.docker.cleanup import remove
        from grader.backends.docker.prereqs import client

        n = 0
        with contextlib.suppress(Exception):
            flt = {"label": [f"{LABEL}=1", f"{LABEL_OWNER}={owner}"]}
            for c in client().containers.list(all=True, filters=flt, ignore_removed=True):
                n += int(remove(c))
        return n

    @classmethod
    def reclaim(cls, *, include_live: bool = False) -> Reclaimed:
        """Containers of gone owners; without the SDK or a reachable daemon the state says
        so and nothing else is affected."""
        try:
            from grader.backends.docker.cleanup import reclaim_containers
            from grader.backends.docker.prereqs import client

            removed, kept = reclaim_containers(client(), include_live=include_live)
        except ImportError as exc:
            return Reclaimed(state=f"unavailable: {exc}")
        except Exception as exc:  # no daemon: a bwrap-only host still gets its folders back
            return Reclaimed(state=f"unavailable: {str(exc).splitlines()[0]}")
        return Reclaimed(removed=tuple(removed), kept=tuple(kept), state="checked")

    @classmethod
    def sweep(cls) -> Reclaimed:
        """Containers are looked for in a background thread, only where a daemon is
        configured, so a slow or absent daemon delays nothing."""
        if not (os.environ.get("DOCKER_HOST") or Path("/var/run/docker.sock").exists()):
            return Reclaimed(state="not configured")
        t = threading.Thread(target=_sweep_containers, name="kgrader-sweep", daemon=True)
        t.start()
        atexit.register(t.join, SWEEP_EXIT_WAIT_S)  # a quick command still finishes it
        return Reclaimed(state="checking in the background")

    @classmethod
    def fingerprint(cls, device: Device) -> dict[str, Any]:
        """The image's id: it holds the interpreter and packages the sandbox runs."""
        from grader.backends.docker.prereqs import image_id

        # No daemon or no image: SandboxUnavailableError (the calibration could not run either).
        return {"image_id": image_id(cls().image_for(device))}

    @classmethod
    def ended_by(cls, outcome: SandboxOutcome) -> EndedBy | None:
        """The judge's tether (its stdin attach) closed, or the container's init was
        signalled from outside: both the daemon's doing, not the candidate's."""
        if outcome.exit_code == EXIT_HOST_GONE:
            return EndedBy("judge_killed", "the judge ended because the host's attach to its "
                           "stdin closed (the docker daemon restarted, or the connection "
                           "broke); retry")
        if outcome.exit_code == 1 and TINI_FORWARD_FAILED in outcome.stderr:
            # The container's init (docker's tini) was sent a signal (a daemon stop, `docker
            # stop`) and could not forward it to the judge, which runs under another uid: it
            # exits 1 and the container with it. Nothing inside can signal the init (no root
            # process is left once the launcher exec'd the judge).
            return EndedBy("judge_killed", "the container's init was sent a signal from "
                           "outside (the docker daemon stopping, or `docker stop`) and ended "
                           "the sandbox; retry")
        return None


def _ran_containers() -> bool:
    """Whether this process created a container (docker is never imported for the answer)."""
    ran = getattr(sys.modules.get("grader.backends.docker.cleanup"), "ran_containers", None)
    return bool(ran is not None and ran())  # absent, or still importing in another thread


def _sweep_containers() -> None:
    owners = labelled_owners()
    if owners is not None and not any(owner_gone(o) for o in owners):
        return  # nothing of a gone owner to reclaim: the SDK is not imported
    try:
        from grader.backends.docker.cleanup import reclaim_containers
        from grader.backends.docker.prereqs import client

        reclaim_containers(client(), gone_only=True)
    except Exception as exc:  # no SDK, no daemon: nothing to reclaim there
        log.info("sweep.docker_unavailable", error=str(exc).splitlines()[0] if str(exc) else "")


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
