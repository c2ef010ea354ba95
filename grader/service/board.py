"""The live board: one ranking per task and device kind, updated as results land.

The store is the record; the board keeps a parsed view of its finished ``leaderboard``
and ``rerun`` jobs (:meth:`Board.record`, the workers' hook; :meth:`Board.sync` at start
for what a killed server missed) and renders the page from it on each request, with the
jobs still queued or running read from the store then (:mod:`grader.service.board_page`).

Ranking (:mod:`grader.leaderboard.live`): an entry (the token's name, plus the
submitter's label) is ranked on a task by a re-run the board queues itself for the
entry's best main run; resubmitting a file never earns a second re-run. A re-run job
belongs to the internal owner ``board:<token id>`` (:data:`RERUN_OWNER`): it counts
against none of the submitter's quotas and is listed only to operators.

Each row links to ``/board/run/<job id>.html``: the run's candidate-facing report (hidden
shapes and secret seeds redacted, as its submitter sees it), public like the board.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import threading
from pathlib import Path
from typing import Any

from grader.grading.redact import facts_for, redact
from grader.leaderboard.aggregate import row_times
from grader.leaderboard.job import classify, classify_rerun, tied_within_noise
from grader.leaderboard.live import MAIN, RERUN, Run, needs_rerun
from grader.logs import get_logger
from grader.report.model import Report
from grader.report.verdict import acceptance_verdict
from grader.service import board_page, pages
from grader.service.store import JobRow, Store
from grader.service.worker import BOARD_MODES, ServiceTask
from grader.service.worker import RERUN as RERUN_MODE

log = get_logger("kgrader.service")
RERUN_OWNER = "board:"
_RUN_PAGE = re.compile(r"run/([0-9a-f]{32})\.html")
_NO_QUOTA = 10**9


def entry_name(token_name: str, label: str) -> str:
    return f"{token_name}/{label}" if label else token_name


def device_of(report: Report, worker: str | None) -> str:
    """The device kind a run was graded on: the report's, else the worker's name
    (``cpu0``, ``cuda1``, ``gpu2``...) less its number."""
    if report.device:
        return report.device
    kind = (worker or "").rstrip("0123456789")
    return {"gpu": "cuda", "": "unknown"}.get(kind, kind)


Interval = tuple[float | None, float | None, float | None]  # low, high, confidence


def speedup_interval(speedup: float | None, report: Report, report_json: str) -> Interval:
    """The speed-up's interval and its confidence, or (None, None, None).

    The paired one where the run has it (:func:`grader.report.verdict.acceptance_verdict`:
    the sign test's order-statistic bounds on the median of ln(t_cand / t_ref) over the
    interleaved pairs, 98% at the default alpha): both sides' noise is in it. Else the
    submission's median-time interval with the reference's time held at its median (95%),
    which leaves the reference's noise out: on a 2-core CPU a torch-add reference inside
    the judge clock's noise gave two entries 3x apart 0.00638x and 0.000489x, each with
    a tight interval of that kind, and so two ranks; paired, they overlap."""
    if speedup is None:
        return None, None, None
    if report.acceptance is not None:
        v = acceptance_verdict(report.acceptance, "the reference")
        if v.low is not None and v.high is not None and v.confidence is not None:
            return v.low, v.high, v.confidence
    sub, _ = row_times(report_json)
    if sub is None or not sub.low or not sub.high or sub.value <= 0:
        return None, None, None
    return speedup * sub.value / sub.high, speedup * sub.value / sub.low, 0.95


class Board:
    """The board's view of the store (``root`` is kept for the data folder's layout)."""

    def __init__(self, root: Path, store: Store, tasks: dict[str, ServiceTask]):
        self.root, self.store, self.tasks = root, store, tasks
        root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.runs: dict[str, Run] = {}
        self.sync()

    def _owner(self, job: JobRow) -> str:
        token_id = job.token_id.removeprefix(RERUN_OWNER)
        tok = self.store.token(token_id)
        return entry_name(tok.name if tok else token_id, job.label)

    def _run(self, job: JobRow, text: str) -> Run:
        report = Report.model_validate_json(text)  # the stored copy: seeds already redacted
        tied = tied_within_noise(report)  # a board job's last attempt (service.worker)
        verdict, _, code, message, speedup, _ = classify_rerun(report) if tied \
            else classify(report)
        low, high, conf = speedup_interval(speedup, report, text)
        return Run(job_id=job.id, entry=self._owner(job), task=job.task,
                   device=device_of(report, job.worker), file_sha=job.source_sha,
                   kind=RERUN if job.mode == RERUN_MODE else MAIN, verdict=verdict, code=code,
                   message=message[:2000], speedup=speedup, low=low, high=high, conf=conf,
                   at=job.finished_at or 0.0)

    def record(self, job_id: str) -> None:
        """Take in one finished board job (the workers' hook, and :meth:`sync`); a main run
        that became its entry's selection gets its re-run queued."""
        job = self.store.job(job_id)
        text = self.store.report_json(job_id)
        if job is None or text is None or job.mode not in BOARD_MODES or job.state != "done":
            return
        run = self._run(job, text)
        with self._lock:
            self.runs[job.id] = run
        if run.kind == MAIN:
            self._schedule(job, run)

    def _schedule(self, job: JobRow, run: Run) -> None:
        with self._lock:
            mine = [r for r in self.runs.values() if (r.entry, r.task, r.device)
                    == (run.entry, run.task, run.device)]
            owner = RERUN_OWNER + job.token_id
            scheduled = {j.source_sha for j in self.store.of_mode(RERUN_MODE)
                         if j.token_id == owner and j.task == job.task and j.label == job.label}
            sel = needs_rerun(mine, scheduled)
            if sel is None:
                return
            source = self.store.source(sel.job_id)
            if source is None:
                return
            key = secrets.token_urlsafe(24)  # no view link: the board's run page shows it
            queued = self.store.submit(
                token_id=owner, task=job.task, mode=RERUN_MODE, label=job.label, source=source,
                source_sha=sel.file_sha, view_sha=hashlib.sha256(key.encode()).hexdigest(),
                max_active=_NO_QUOTA, max_per_day=_NO_QUOTA)
        log.info("board_rerun_queued", entry=run.entry, task=job.task, of=sel.job_id,
                 job=getattr(queued, "id", queued))

    def sync(self) -> int:
        """Take in the finished board jobs the view lacks (a server killed between a job's
        result and its board row; every start). Returns how many were added."""
        added = 0
        for mode in BOARD_MODES:
            for job in self.store.finished(mode):
                if job.id not in self.runs:
                    self.record(job.id)
                    added += 1
        return added

    def pending(self) -> list[tuple[JobRow, str]]:
        """The board jobs queued or running now, with their entry names."""
        out = []
        for mode in BOARD_MODES:
            for job in self.store.of_mode(mode, ("queued", "running")):
                out.append((job, self._owner(job)))
        return sorted(out, key=lambda p: p[0].created_at)

    def failed_reruns(self) -> list[tuple[JobRow, str]]:
        """Re-runs the service could not grade (infrastructure, after every attempt)."""
        return [(j, self._owner(j)) for j in self.store.of_mode(RERUN_MODE, ("failed",))]

    def read(self, name: str) -> bytes | None:
        """``index.html`` (the board) or ``run/<job id>.html`` (one run's public report);
        None for anything else."""
        if name == "index.html":
            with self._lock:
                runs = list(self.runs.values())
            return board_page.index(runs, sorted(self.tasks), self.pending(),
                                    self.failed_reruns()).encode()
        m = _RUN_PAGE.fullmatch(name)
        if m is None:
            return None
        job = self.store.job(m.group(1))
        text = self.store.report_json(m.group(1)) if job is not None else None
        if job is None or text is None or job.mode not in BOARD_MODES or job.state != "done":
            return None
        report = Report.model_validate_json(text)
        task = self.tasks.get(job.task)
        public = redact(report, facts_for(task.spec if task else None, report))
        facts = job.public() | {"entry": self._owner(job)}
        doc: dict[str, Any] = json.loads(public.model_dump_json())
        return pages.report_page(facts, doc).encode()
