"""Secret correctness seeds: an operator secret replaces each task's public seeds.

A task's ``correctness.seeds`` are public (they ship with the task), so a submission could
be tuned to them. A leaderboard run derives its own seeds as ``HMAC-SHA256(secret,
"<task>:<i>")`` (31 bits each), writes a modified copy of the task into a private temp
folder, and evaluates against that copy. The same secret gives the same seeds (so a
resumed run checks the same inputs); the secret itself is never written to the state,
the page or a log, and seed values are redacted from stored reports
(:func:`grader.leaderboard.job.redact_seeds`).

Secret sources, first found wins: ``--seed-secret FILE``, the environment variable
``KGRADER_LEADERBOARD_SECRET``, else a random secret for this process only (a warning says
that the seeds are then not reproducible across invocations).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from grader.errors import UsageError
from grader.task import load_task

SECRET_ENV = "KGRADER_LEADERBOARD_SECRET"
MIN_SECRET_BYTES = 16


@dataclass(frozen=True)
class Secret:
    """The operator's secret and a description of where it came from (safe to log)."""

    key: bytes
    source: str

    def __repr__(self) -> str:  # never print the key, even by accident
        return f"Secret(source={self.source!r})"


def load_secret(path: Path | None) -> Secret:
    """The secret from ``path``, else ``$KGRADER_LEADERBOARD_SECRET``, else a random one."""
    if path is not None:
        try:
            key = path.read_bytes().strip()
        except OSError as e:
            raise UsageError(f"cannot read the seed secret {path}: {e.strerror or e}") from None
        source = f"file {path}"
    elif os.environ.get(SECRET_ENV):
        key, source = os.environ[SECRET_ENV].encode(), f"${SECRET_ENV}"
    else:
        return Secret(secrets.token_bytes(32), "random for this invocation (not reproducible)")
    if len(key) < MIN_SECRET_BYTES:
        raise UsageError(f"the seed secret from {source} is shorter than {MIN_SECRET_BYTES} bytes")
    return Secret(key, source)


def fingerprint(secret: Secret) -> str:
    """A public name of the secret (HMAC of a fixed label, 16 hex digits): a state records
    it, so that a resumed run or a replay on another secret is refused rather than graded on
    other seeds (it reveals neither the secret nor a seed)."""
    return hmac.new(secret.key, b"kgrader seed fingerprint", hashlib.sha256).hexdigest()[:16]


def derive_seeds(secret: Secret, task: str, n: int) -> list[int]:
    """``n`` seeds for ``task``: the first 31 bits of HMAC-SHA256(secret, "task:i").

    31 bits because the judge mixes a seed with shape indices into a signed 64-bit
    generator seed (seed * 1_000_003 + ...); wider seeds overflow it.
    """
    out = []
    for i in range(n):
        mac = hmac.new(secret.key, f"{task}:{i}".encode(), hashlib.sha256).digest()
        out.append(int.from_bytes(mac[:4], "big") >> 1)
    return out


@dataclass(frozen=True)
class TaskPayload:
    """A task as a job carries it: the secret-seeded task.json text and the reference.

    ``spec_sha`` hashes the *public* task files (never the seeds), so it identifies the
    task in the state without revealing anything.
    """

    name: str
    task_json: str = field(repr=False)
    reference: str = field(repr=False)
    spec_sha: str = ""
    seeds: tuple[int, ...] = field(default=(), repr=False)
    source_dir: str = ""
    # A generated-shape task's draw seed, from the secret: every submission meets the
    # same drawn shapes (grader.shapes).
    shape_seed: int | None = field(default=None, repr=False)

    def write(self, folder: Path) -> Path:
        """Write task.json and reference.py into ``folder`` (private, created here)."""
        folder.mkdir(mode=0o700, parents=True, exist_ok=False)
        (folder / "task.json").write_text(self.task_json, encoding="utf-8")
        (folder / "reference.py").write_text(self.reference, encoding="utf-8")
        return folder


def task_payload(task_dir: Path, secret: Secret) -> TaskPayload:
    """Load and validate a task, then replace its correctness seeds with secret ones."""
    spec, reference = load_task(task_dir)
    raw = (task_dir / "task.json").read_bytes()
    spec_sha = hashlib.sha256(raw + b"\0" + reference.encode()).hexdigest()
    n = max(len(spec.correctness.seeds), 2)
    seeds = derive_seeds(secret, spec.name, n)
    secret_spec = spec.model_copy(update={
        "correctness": spec.correctness.model_copy(update={"seeds": seeds})})
    shape_seed = derive_seeds(secret, f"{spec.name}:shapes", 1)[0] \
        if spec.shapes.generate is not None else None
    return TaskPayload(name=spec.name, task_json=json.dumps(secret_spec.model_dump(mode="json")),
                       reference=reference, spec_sha=spec_sha, seeds=tuple(seeds),
                       shape_seed=shape_seed,
                       source_dir=str(task_dir))
