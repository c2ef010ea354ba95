"""Replay: grade a recorded result again with the same seeds, policy and versions, and say
whether its verdict holds.

A leaderboard row records the submission, task, file sha, round, verdict and code and
the report (the policy it was scanned under, kgrader's version); the state records the
secret's fingerprint (:func:`grader.leaderboard.seeds.fingerprint`) and each task's
content sha (its reference check). A service job records its source, task, mode and
report; its seeds come from the server's secret. The file, the task folder and the
secret must be the recorded ones (checked by sha and fingerprint: another one is refused,
:data:`replay_mismatch` / :data:`seed_secret_mismatch`); a different policy or kgrader
version is said in the result's ``notes``, never silently used.

The verdict *holds* when the replay's verdict (and, for a failure, its code) equals the
recorded one. Speed-ups are printed beside each other; they are fresh measurements.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader import __version__
from grader.errors import InfrastructureError, UsageError
from grader.leaderboard.job import TIED, Job, run_job
from grader.leaderboard.seeds import Secret, fingerprint, task_payload
from grader.leaderboard.state import State

SEED_META = "seed_fingerprint"


@dataclass
class Replay:
    """What was recorded, what the replay found, and whether the verdict holds."""

    what: str
    recorded_verdict: str
    recorded_code: str | None
    verdict: str
    code: str | None
    recorded_speedup: float | None = None
    speedup: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        return self.verdict == self.recorded_verdict and (
            self.verdict == "ok" or self.code == self.recorded_code)

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "holds": self.holds,
                "recorded": {"verdict": self.recorded_verdict, "code": self.recorded_code,
                             "speedup": self.recorded_speedup},
                "replayed": {"verdict": self.verdict, "code": self.code,
                             "speedup": self.speedup}, "notes": self.notes}


def recorded_facts(report_json: str | None) -> tuple[str | None, str | None]:
    """(policy, kgrader version) a recorded report names."""
    try:
        rep = json.loads(report_json) if report_json else {}
    except ValueError:
        return None, None
    scan = rep.get("scan") if isinstance(rep, dict) else None
    policy = scan.get("policy") if isinstance(scan, dict) else None
    return policy, (rep.get("kgrader_version") or None) if isinstance(rep, dict) else None


def compare_versions(recorded: str | None, notes: list[str]) -> None:
    if recorded and recorded != __version__:
        notes.append(f"recorded by kgrader {recorded}; replayed by {__version__}")
    elif not recorded:
        notes.append("the record names no kgrader version")


def replay_row(state_path: Path, submission: str, task_dir: Path, file: Path, secret: Secret,
               rnd: str = "main", backend: str = "auto", device: str = "auto") -> Replay:
    """Grade one leaderboard row (``submission``, the task of ``task_dir``, ``rnd``) again."""
    payload = task_payload(task_dir, secret)
    with State.open(state_path, create=False) as st:
        have = st.meta(SEED_META)
        rows = [r for r in st.evaluations() if (r.submission, r.task, r.round)
                == (submission, payload.name, rnd)]
        checks = {c.spec_sha for c in st.task_checks() if c.name == payload.name}
    notes: list[str] = []
    if have is None:
        notes.append("the state records no seed fingerprint (an older kgrader): the seeds "
                     "cannot be checked to be the recorded ones")
    elif have != fingerprint(secret):
        raise UsageError(f"{state_path} was graded on another secret's seeds (fingerprint "
                         f"{have}; the secret from {secret.source} is {fingerprint(secret)}): "
                         "pass the --seed-secret it was graded with", code="seed_secret_mismatch")
    if not rows:
        raise UsageError(f"{state_path} holds no {rnd!r} row of submission {submission!r} on "
                         f"task {payload.name!r}", code="replay_mismatch")
    row = rows[0]
    try:
        data = file.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {file}: {e.strerror or e}") from None
    if hashlib.sha256(data).hexdigest() != row.file_sha:
        raise UsageError(f"{file} is not the file the row graded (sha256 {row.file_sha[:12]}...)",
                         code="replay_mismatch")
    if checks and payload.spec_sha not in checks:
        raise UsageError(f"{task_dir} is not the task the state graded (its content changed)",
                         code="replay_mismatch")
    policy, version = recorded_facts(row.report_json)
    compare_versions(version, notes)
    out = run_job(Job(submission=submission, task=payload, file_sha=row.file_sha, round=rnd,
                      source=data.decode("utf-8", "replace"), backend=backend, device=device,
                      build_cache=False),
                  tie_ok=True)
    if out.row is None:
        raise InfrastructureError(f"the replay could not grade it: {out.infra_error}")
    if out.row.code == TIED:
        notes.append("correctness reproduced; this host could not time it apart from the "
                     "reference (tied within noise), so the speed-up is not reproduced")
    new_policy, _ = recorded_facts(out.row.report_json)
    if policy != new_policy:
        notes.append(f"recorded under policy {policy or 'unknown'}; replayed under "
                     f"{new_policy or 'unknown'}")
    return Replay(f"leaderboard row {submission}/{payload.name} ({rnd})", row.verdict, row.code,
                  out.row.verdict, out.row.code, row.speedup, out.row.speedup, notes)
