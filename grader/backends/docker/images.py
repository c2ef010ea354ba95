"""Build kgrader's sandbox images (``kgrader image build``).

A build is a flat list of steps: resolve the flavor, check the base image is local (we
never pull unless asked), hash what goes into the image, skip when an image with that
hash is already tagged, prepare a minimal context (Dockerfile, ``sandbox/``, ``wheels/``),
run the build with the docker SDK with network ``none``, stream its progress.

Flavors:

=======  ==================  =======================  =======================================
flavor   Dockerfile          default tag              base
=======  ==================  =======================  =======================================
cuda     ``Dockerfile.cuda``  ``kgrader/cuda:latest``  the file's default (official PyTorch)
rocm     ``Dockerfile.rocm``  ``kgrader/rocm:latest``  the file's default (official ROCm)
cpu      ``Dockerfile.cuda``  ``kgrader/cpu:latest``   ``kgrader/base:bookworm`` + CPU wheels
=======  ==================  =======================  =======================================
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from grader.errors import ImageMissingError, InfrastructureError, UsageError
from grader.logs import get_logger

if TYPE_CHECKING:  # the SDK is imported where it is used: every CLI start would pay for it
    import docker

Flavor = Literal["cuda", "rocm", "cpu"]
FLAVORS: tuple[Flavor, ...] = ("cuda", "rocm", "cpu")

LOCAL_BASE = "kgrader/base:bookworm"
DEFAULT_WHEEL_CACHE = Path("/var/cache/kgrader/wheels")
HASH_LABEL = "kgrader.content-hash"
REPO_ROOT = Path(__file__).resolve().parents[3]

_DOCKERFILES: dict[Flavor, str] = {
    "cuda": "Dockerfile.cuda",
    "rocm": "Dockerfile.rocm",
    "cpu": "Dockerfile.cuda",
}
_ARG_BASE = re.compile(r"^\s*ARG\s+BASE_IMAGE=(\S+)\s*$")
_SKIP_NAMES = {"__pycache__", ".pytest_cache", ".mypy_cache"}

log = get_logger("kgrader.images")


def default_tag(flavor: Flavor) -> str:
    """The tag the docker backend looks for by default for ``flavor``; the only place image
    names are made (a device's flavor has the device's name)."""
    return f"kgrader/{flavor}:latest"


def default_image(device: Flavor) -> str:
    """The image the docker backend runs for ``device`` unless told otherwise."""
    return default_tag(device)


def build_command(image: str, device: Flavor) -> str:
    """The exact command that builds ``image`` for ``device`` (for "image missing" hints)."""
    cmd = f"kgrader image build --flavor {device}"
    if image != default_tag(device):
        cmd += f" --tag {image}"
    if device == "cpu":
        cmd += f" --base {LOCAL_BASE} --wheels {DEFAULT_WHEEL_CACHE}"
        cmd += "  (or, as root: scripts/docker-setup.sh, which also makes the base and wheels)"
    return cmd


@dataclass(frozen=True)
class BuildRequest:
    """What to build. ``base=None`` keeps the Dockerfile's default (cpu: the local base)."""

    flavor: Flavor
    base: str | None = None
    tag: str | None = None
    wheels: Path | None = None
    repo_root: Path = REPO_ROOT
    force: bool = False
    allow_pull: bool = False

    @property
    def dockerfile(self) -> Path:
        """The Dockerfile this flavor builds from."""
        return self.repo_root / _DOCKERFILES[self.flavor]

    @property
    def image_tag(self) -> str:
        """The tag the result gets."""
        return self.tag or default_tag(self.flavor)

    @property
    def base_image(self) -> str | None:
        """The ``BASE_IMAGE`` build argument, or ``None`` for the Dockerfile's default."""
        if self.base is None and self.flavor == "cpu":
            return LOCAL_BASE
        return self.base

    @property
    def effective_base(self) -> str:
        """The base the build will use: the argument, else the Dockerfile's default."""
        if self.base_image is not None:
            return self.base_image
        for line in self.dockerfile.read_text().splitlines():
            match = _ARG_BASE.match(line)
            if match:
                return match.group(1)
        raise UsageError(f"{self.dockerfile} has no `ARG BASE_IMAGE=...` default")


@dataclass(frozen=True)
class BuildResult:
    """What :func:`build_image` did."""

    tag: str
    image_id: str
    content_hash: str
    skipped: bool


def resolve_wheels(req: BuildRequest) -> Path | None:
    """The wheel directory for ``req``: given, or the local cache for the cpu flavor.

    The cpu flavor cannot work without CPU wheels (the local base has no torch), so it
    is an error when neither ``--wheels`` nor the cache provides them.
    """
    if req.wheels is not None:
        if not any(req.wheels.glob("*.whl")):
            raise UsageError(f"no *.whl files in {req.wheels}", code="no_wheels")
        return req.wheels
    if req.flavor == "cpu":
        if any(DEFAULT_WHEEL_CACHE.glob("*.whl")):
            return DEFAULT_WHEEL_CACHE
        raise UsageError(
            "the cpu flavor needs CPU wheels of torch/triton/numpy",
            code="no_wheels",
            hint=f"pass --wheels DIR, or run scripts/docker-setup.sh (fills {DEFAULT_WHEEL_CACHE})",
        )
    return None


def _sandbox_files(repo_root: Path) -> list[Path]:
    """The harness files that go into the image, sorted, without caches."""
    root = repo_root / "sandbox"
    if not root.is_dir():
        raise UsageError(f"no sandbox/ package in {repo_root}", code="no_harness")
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_NAMES)
        files.extend(Path(dirpath) / f for f in sorted(filenames) if not f.endswith(".pyc"))
    return files


def content_hash(req: BuildRequest, wheels: Path | None, base_id: str) -> str:
    """Hash of everything that determines the image: Dockerfile, harness, wheels, base.

    Wheels are identified by name and size (hashing ~400 MB each run would cost more than
    it protects: wheel names carry their versions).
    """
    h = hashlib.sha256()

    def feed(tag: str, data: bytes) -> None:
        h.update(tag.encode() + b"\0" + len(data).to_bytes(8, "big") + data)

    feed("dockerfile", req.dockerfile.read_bytes())
    for path in _sandbox_files(req.repo_root):
        feed("file:" + path.relative_to(req.repo_root).as_posix(), path.read_bytes())
    for whl in sorted(wheels.glob("*.whl")) if wheels else []:
        feed("wheel:" + whl.name, str(whl.stat().st_size).encode())
    feed("base", base_id.encode())
    return h.hexdigest()


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def prepare_context(req: BuildRequest, wheels: Path | None, dest: Path) -> None:
    """Fill ``dest`` with exactly what the build may see: Dockerfile, sandbox/, wheels/."""
    shutil.copy2(req.dockerfile, dest / "Dockerfile")
    for path in _sandbox_files(req.repo_root):
        target = dest / path.relative_to(req.repo_root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    (dest / "sandbox").mkdir(exist_ok=True)
    (dest / "wheels").mkdir()
    for whl in sorted(wheels.glob("*.whl")) if wheels else []:
        _link_or_copy(whl, dest / "wheels" / whl.name)


def connect() -> docker.DockerClient:
    """The docker client (:func:`grader.backends.docker.prereqs.client`)."""
    from grader.backends.docker.prereqs import client

    return client()


def _local_image_id(client: docker.DockerClient, name: str) -> str | None:
    import docker.errors

    try:
        return str(client.images.get(name).id)
    except docker.errors.ImageNotFound:
        return None


def _existing_hash(client: docker.DockerClient, tag: str) -> str | None:
    import docker.errors

    try:
        labels = client.images.get(tag).labels or {}
    except docker.errors.ImageNotFound:
        return None
    value = labels.get(HASH_LABEL)
    return str(value) if value is not None else None


def _stream_build(
    client: docker.DockerClient, context: Path, req: BuildRequest, digest: str
) -> Iterator[dict[str, Any]]:
    buildargs = {"BASE_IMAGE": req.base_image} if req.base_image else {}
    labels = {HASH_LABEL: digest, "kgrader.flavor": req.flavor, "kgrader": "image"}
    chunks: Iterator[dict[str, Any]] = client.api.build(
        path=str(context),
        tag=req.image_tag,
        buildargs=buildargs,
        labels=labels,
        network_mode="none",
        pull=False,  # "always pull newer"; a missing base is pulled only when allowed above
        rm=True,
        forcerm=True,
        decode=True,
    )
    return chunks


def build_image(
    req: BuildRequest, progress: Callable[[str], None] = lambda line: None
) -> BuildResult:
    """Build ``req`` (or skip when up to date); ``progress`` gets each output line."""
    client = connect()
    wheels = resolve_wheels(req)
    base_name = req.effective_base
    found = _local_image_id(client, base_name)
    if found is None and not req.allow_pull:
        raise ImageMissingError(
            f"base image {base_name} is not present locally (kgrader never pulls)",
            hint=(
                "run scripts/docker-setup.sh"
                if base_name == LOCAL_BASE
                else f"docker pull {base_name}, or pass --pull to let the build pull it"
            ),
        )
    base_id = found or base_name
    digest = content_hash(req, wheels, base_id)
    if not req.force and _existing_hash(client, req.image_tag) == digest:
        log.info("image.build.skipped", tag=req.image_tag, content_hash=digest[:12])
        return BuildResult(
            req.image_tag, _local_image_id(client, req.image_tag) or "", digest, True
        )
    previous = _local_image_id(client, req.image_tag)
    log.info("image.build.start", tag=req.image_tag, flavor=req.flavor, base=base_name)
    with tempfile.TemporaryDirectory(prefix="kgrader-build-", dir=_context_parent(wheels)) as tmp:
        context = Path(tmp)
        prepare_context(req, wheels, context)
        image_id = _run_build(client, context, req, digest, progress)
    if previous and previous != image_id:
        _remove_quietly(client, previous)
    log.info("image.build.done", tag=req.image_tag, image_id=image_id[:19])
    return BuildResult(req.image_tag, image_id, digest, False)


def _remove_quietly(client: docker.DockerClient, image_id: str) -> None:
    """Drop the image a rebuild replaced, unless something (a container, a tag) uses it."""
    import docker.errors

    try:
        client.images.remove(image_id)
        log.info("image.previous.removed", image_id=image_id[:19])
    except docker.errors.APIError as exc:
        log.info("image.previous.kept", image_id=image_id[:19], reason=str(exc.explanation))


def _context_parent(wheels: Path | None) -> str | None:
    """Put the context next to the wheels so they can be hard-linked, not copied."""
    if wheels is not None and os.access(wheels.parent, os.W_OK):
        return str(wheels.parent)
    return None


def _run_build(
    client: docker.DockerClient,
    context: Path,
    req: BuildRequest,
    digest: str,
    progress: Callable[[str], None],
) -> str:
    import docker.errors

    image_id = ""
    try:
        for chunk in _stream_build(client, context, req, digest):
            if "error" in chunk:
                raise InfrastructureError(
                    f"docker build of {req.image_tag} failed: {str(chunk['error']).strip()}",
                    code="image_build_failed",
                )
            text = chunk.get("stream")
            if isinstance(text, str):
                for line in text.splitlines():
                    if line.strip():
                        progress(line)
            aux = chunk.get("aux")
            if isinstance(aux, dict) and "ID" in aux:
                image_id = str(aux["ID"])
    except docker.errors.APIError as exc:
        raise InfrastructureError(
            f"docker build of {req.image_tag} failed: {exc}", code="image_build_failed"
        ) from exc
    return image_id or (_local_image_id(client, req.image_tag) or "")
