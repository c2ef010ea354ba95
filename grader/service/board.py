"""The live board: leaderboard entries committed to a leaderboard state as they land, the
page rendered by :func:`grader.leaderboard.render.render_site` (the same page as the
batch's, hidden shapes redacted) when a result changed it, at most once per request.

An entry is the token's name (plus the submitter's label): its latest file per task is
what the board ranks. The service does not run the batch's top-K re-runs, so its entries
are shown as "not re-measured". The per-evaluation pages the renderer writes are not
served: a submission's report is its submitter's (the API, or its private view link).
"""

from __future__ import annotations

import re
import shutil
import tempfile
import threading
from pathlib import Path

from grader.leaderboard.job import classify
from grader.leaderboard.render import SHAPES_META, render_site, shape_meta
from grader.leaderboard.state import EvalRow, State, SubmissionRow
from grader.report.model import Report
from grader.service.store import Store
from grader.service.worker import ServiceTask

_PLOT = re.compile(r"[a-z_]{1,40}\.png")


def entry_name(token_name: str, label: str) -> str:
    return f"{token_name}/{label}" if label else token_name


class Board:
    """The board's state file and its rendered site under ``root``."""

    def __init__(self, root: Path, store: Store, tasks: dict[str, ServiceTask]):
        self.root, self.store = root, store
        root.mkdir(parents=True, exist_ok=True)
        self.state_path = root / "board.sqlite"
        self._lock = threading.Lock()
        self._dirty = True
        self._site: Path | None = None
        names = sorted(tasks)
        with State.open(self.state_path) as st:
            st.set_meta("tasks", names)
            st.set_meta("usable_tasks", names)
            st.set_meta(SHAPES_META, shape_meta(t.payload for t in tasks.values()))
            st.set_meta("top_k", 0)
            st.set_meta("top", [])
        self.sync()

    def record(self, job_id: str) -> None:
        """Commit one finished leaderboard job (the worker's hook, and :meth:`sync`)."""
        job = self.store.job(job_id)
        text = self.store.report_json(job_id)
        if job is None or text is None or job.mode != "leaderboard" or job.state != "done":
            return
        report = Report.model_validate_json(text)  # the stored copy: seeds already redacted
        tok = self.store.token(job.token_id)
        name = entry_name(tok.name if tok else job.token_id, job.label)
        verdict, stage, code, message, speedup, src = classify(report)
        row = EvalRow(submission=name, task=job.task, file_sha=job.source_sha, round="main",
                      verdict=verdict, stage=stage, code=code, message=message[:2000],
                      speedup=speedup, speedup_source=src,
                      t_sub_ms=report.timing.median_ms if report.timing else None,
                      report_json=text,
                      wall_s=round((job.finished_at or 0.0) - (job.started_at or 0.0), 3),
                      engine=f"service:{job.worker or ''}")
        with self._lock, State.open(self.state_path) as st:
            files = next((s.files for s in st.submissions() if s.name == name), {})
            st.record_submission(SubmissionRow(name, job.source_sha, "valid", "ok", None,
                                               {**files, job.task: job.source_sha}))
            st.record_evaluation(row, replace=True)
            self._dirty = True

    def sync(self) -> int:
        """Commit the finished leaderboard jobs the board lacks (a server killed between a
        job's result and its board row); the store is the record, the board a view of it.
        Returns how many were added."""
        with State.open(self.state_path) as st:
            have = {(k[0], k[1], k[2]) for k in st.done_keys()}
        added = 0
        for job in self.store.finished("leaderboard"):
            tok = self.store.token(job.token_id)
            key = (entry_name(tok.name if tok else job.token_id, job.label), job.task,
                   job.source_sha)
            if key not in have:
                self.record(job.id)
                added += 1
        return added

    def read(self, name: str) -> bytes | None:
        """A page of the site (``index.html`` or a top-level plot), rendered again first
        when a result changed it; None for anything else."""
        if name != "index.html" and not _PLOT.fullmatch(name):
            return None
        with self._lock:
            if self._dirty or self._site is None:
                new = Path(tempfile.mkdtemp(prefix="site-", dir=self.root))
                render_site(self.state_path, new)
                old, self._site, self._dirty = self._site, new, False
                if old is not None:
                    shutil.rmtree(old, ignore_errors=True)
            path = self._site / name
            return path.read_bytes() if path.is_file() and not path.is_symlink() else None
