"""What ``kgrader serve`` is started with, and the parts built from it."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from grader.backends.select import detect_device
from grader.errors import UsageError
from grader.leaderboard.engine import local_gpus
from grader.leaderboard.seeds import SECRET_ENV, Secret, load_secret
from grader.scan import MAX_BYTES
from grader.service.sql import is_url
from grader.service.worker import Slot

STORE_NAME = "service.sqlite"
SECRET_NAME = "seed-secret"


@dataclass(frozen=True)
class ServiceConfig:
    """The server's settings. ``data_dir`` holds the store (unless ``db`` names a
    PostgreSQL database), the board and (unless one is given) the seed secret of
    leaderboard entries; ``tasks_dir`` is a folder of task
    folders, the only tasks a client may name."""

    tasks_dir: Path
    data_dir: Path
    backend: str = "auto"
    device: str = "auto"
    workers: int | None = None
    max_source_bytes: int = 256 * 1024
    max_attempts: int = 4
    retry_backoff_s: float = 10.0  # the first retry's wait; doubled per retry (worker.retry_delay)
    read_per_min: float = 600.0
    board_refresh_s: int = 5
    seed_secret: Path | None = None
    db: str | None = None  # a postgresql:// URL; None: SQLite in data_dir
    warm: int = 0  # warm sandboxes kept per template (grader.pool); 0: every job cold
    ray_address: str | None = None  # grade on this Ray cluster (grader.service.ray_workers)

    def __post_init__(self) -> None:
        if not 1 <= self.max_source_bytes <= MAX_BYTES:
            raise UsageError(f"--max-source-bytes must be between 1 and {MAX_BYTES}")
        if self.workers is not None and self.workers < 1:
            raise UsageError("--workers must be at least 1")
        if self.warm < 0:
            raise UsageError("--warm must be 0 (cold) or more")
        if self.max_attempts < 1:
            raise UsageError("--max-attempts must be at least 1")
        if not 0 <= self.retry_backoff_s <= 3600:
            raise UsageError("--retry-backoff must be between 0 and 3600 seconds")
        if self.ray_address is not None:
            if not self.ray_address.strip():
                raise UsageError("--ray-address must be HOST:PORT or auto")
            if self.warm:
                raise UsageError("--warm keeps sandboxes on this host: it cannot be combined "
                                 "with --ray-address (each Ray job runs cold on its node)")
            if self.device == "rocm":
                raise UsageError("--ray-address grades on cpu or cuda, not --device rocm")
        if self.db is not None and not is_url(self.db):
            raise UsageError("--db must be a postgresql:// URL (without it: SQLite in --data)")

    @property
    def max_request_bytes(self) -> int:
        """JSON escaping can grow a source up to 6x (``\\uXXXX``); the rest is small."""
        return self.max_source_bytes * 6 + 16 * 1024

    @property
    def store_path(self) -> Path:
        return self.data_dir / STORE_NAME

    @property
    def store_target(self) -> str | Path:
        """The store: the PostgreSQL URL when given, else the SQLite file in ``data_dir``."""
        return self.db if self.db is not None else self.store_path

    def secret(self) -> Secret:
        """The given secret, else ``$KGRADER_LEADERBOARD_SECRET``, else one kept in
        ``data_dir`` (made once, 0600): a restart grades entries on the same seeds."""
        if self.seed_secret is not None or os.environ.get(SECRET_ENV):
            return load_secret(self.seed_secret)
        path = self.data_dir / SECRET_NAME
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        return load_secret(path)

    def slots(self) -> list[Slot]:
        """One worker per GPU on a GPU host (``workers`` may use fewer); else ``workers``
        (default 1) CPU workers. (With ``ray_address`` the cluster decides:
        :func:`grader.service.ray_workers.slots_for`.)"""
        device = detect_device() if self.device == "auto" else self.device
        if device == "cuda":
            gpus = local_gpus()
            if not gpus:
                raise UsageError("--device cuda: no /dev/nvidiaN on this machine")
            gpus = gpus[: self.workers] if self.workers else gpus
            return [Slot(f"gpu{g}", self.backend, device, (g,)) for g in gpus]
        return [Slot(f"{device}{i}", self.backend, device) for i in range(self.workers or 1)]
