"""Automatic recording: the few calls that grading code makes when an evaluation finishes.

Each hook builds an :class:`~grader.experience.model.Attempt` and adds it to the default
store (:func:`grader.experience.store.default_path`). The store is a memory, not a
verdict: a hook never raises and never changes what the caller returns. A store that
cannot be opened or written (full disk, a corrupt or newer file) is logged as one
``experience_not_recorded`` warning and the grade goes on. ``KGRADER_EXPERIENCE=off``
switches recording off.

Callers (whoever finishes an evaluation calls the hook itself, after its own commit):

* ``kgrader run --records`` (:mod:`grader.cli.app`) and the agent's ``accept_candidate``
  (:mod:`grader.agent.tools`) -> :func:`remember_records_folder` after
  :meth:`grader.records.Records.finish`, with origin ``run`` / ``tool``;
* :mod:`grader.agent.tools` compile/bench/profile -> :func:`remember_tool`;
* ``kgrader leaderboard run`` (:mod:`grader.cli.leaderboard`) -> :func:`remember_leaderboard`
  per committed job, handed to :func:`grader.leaderboard.runner.run_leaderboard`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from grader.experience.extract import attempt_from_leaderboard, attempt_from_report
from grader.experience.model import MAX_SOURCE_BYTES, Attempt, Origin
from grader.experience.store import ExperienceStore, recording_enabled
from grader.logs import get_logger
from grader.measure.peaks import _cpu_model
from grader.report.model import Report
from grader.task import TaskSpec

__all__ = ["host_cpu_model", "remember_leaderboard", "remember_records_folder", "remember_tool"]

log = get_logger("kgrader.experience")


def host_cpu_model() -> str | None:
    """This host's CPU model (the fingerprint's, from :mod:`grader.measure.peaks`)."""
    try:
        return _cpu_model() or None
    except Exception:  # a missing /proc is no reason to lose the record
        return None


def _store(build: Callable[[], Attempt | None], what: str, path: str | Path | None = None) -> bool:
    """Build and add one attempt; True when it was stored. Never raises."""
    if path is None and not recording_enabled():
        return False
    try:
        attempt = build()
        if attempt is None:
            return False
        with ExperienceStore.open(path) as store:
            store.add(attempt)
        return True
    except Exception as e:  # the memory must never fail or change a grade
        log.warning("experience_not_recorded", what=what, error=f"{type(e).__name__}: {e}")
        return False


def _read_text(path: Path, cap: int) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(cap).decode("utf-8", "replace")
    except OSError:
        return None


def remember_records_folder(folder: Path, report: Report, accepted: bool | None, *,
                            origin: Origin = "run", origin_ref: str | None = None,
                            path: str | Path | None = None) -> bool:
    """Record a finished records evaluation folder (task.json and candidate.py inside it)."""
    def build() -> Attempt:
        task_text = _read_text(folder / "task.json", 4 * 1024 * 1024)
        task = json.loads(task_text) if task_text else None
        return attempt_from_report(
            report, origin=origin, task=task if isinstance(task, dict) else None,
            source=_read_text(folder / "candidate.py", MAX_SOURCE_BYTES + 1), accepted=accepted,
            origin_ref=origin_ref or str(folder), host_cpu_model=host_cpu_model())
    return _store(build, "records", path)


def remember_tool(spec: TaskSpec, report: Report, source: str, tool: str,
                  profile: Mapping[str, Any] | None = None, *, path: str | Path | None = None) -> bool:
    """Record an agent tool's evaluation; ``profile`` adds the roofline figures when present."""
    def build() -> Attempt:
        prof = profile or {}
        frac = prof.get("roofline_fraction")
        bottleneck = prof.get("bottleneck")
        notes = prof.get("notes")
        diag = [f"bottleneck: {bottleneck}"] if isinstance(bottleneck, str) and bottleneck else []
        if isinstance(notes, list):
            diag += [str(n) for n in notes[:8]]
        return attempt_from_report(
            report, origin="tool", task=spec, source=source, origin_ref=tool,
            host_cpu_model=host_cpu_model(), diagnostics="\n".join(diag),
            roofline_fraction=float(frac) if isinstance(frac, int | float) else None,
            bottleneck=bottleneck if isinstance(bottleneck, str) and bottleneck else None)
    return _store(build, tool, path)


def remember_leaderboard(job: Any, row: Any, *, local: bool, path: str | Path | None = None) -> bool:
    """Record one finished leaderboard job (a :class:`~grader.leaderboard.job.Job` and its row).

    The reference checks are skipped: they grade the task's own code, not an attempt.
    ``local``: the job ran on this host (so the host's CPU model describes it).
    """
    if getattr(job, "round", None) == "reference":
        return False

    def build() -> Attempt:
        task = json.loads(job.task.task_json)  # secret seeds inside: only shapes/tags are kept
        return attempt_from_leaderboard(row, source=job.source, task=task if isinstance(task, dict) else None,
                                        host_cpu_model=host_cpu_model() if local else None)
    return _store(build, "leaderboard", path)
