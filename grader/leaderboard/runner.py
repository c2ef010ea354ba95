"""The batch: reference checks, every submission x task, then top-K re-runs.

Steps, in order (each result committed by :mod:`grader.leaderboard.state` as it lands):

1. load the tasks and replace their correctness seeds with secret ones;
2. run each task's reference as a candidate (once per task content); a task whose
   reference fails is reported and skipped;
3. validate the submissions (:mod:`grader.leaderboard.submissions`);
4. evaluate every valid submission file on every usable task (round ``main``), skipping
   what the state already holds -- this is what makes a killed run resumable;
5. pick the top K by the ``main`` round and evaluate their files again (round ``rerun``:
   new evaluations, so fresh phase seeds, runners and buffers). The published ranking
   uses only the re-run's figures: the selection measurement never becomes the record.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grader.backends.cleanup import sweep_orphans
from grader.errors import UsageError
from grader.leaderboard.aggregate import INFRA_META, infra_key, select_top
from grader.leaderboard.engine import Engine, LocalEngine, RayEngine
from grader.leaderboard.job import Job, JobOutcome, redact_seeds
from grader.leaderboard.progress import Progress
from grader.leaderboard.render import SHAPES_META, shape_meta
from grader.leaderboard.seeds import (
    Secret,
    TaskPayload,
    fingerprint,
    load_secret,
    task_payload,
)
from grader.leaderboard.state import EvalRow, State, SubmissionRow, TaskCheck, exclusive
from grader.leaderboard.submissions import Submission, discover
from grader.logs import get_logger
from grader.outpaths import check_output_file

log = get_logger("kgrader.leaderboard")


@dataclass
class RunConfig:
    """What ``kgrader leaderboard run`` was asked to do."""

    tasks: Sequence[Path]
    submissions: Path
    state: Path = Path("leaderboard.sqlite")
    workers: int | None = None
    engine: str = "local"
    backend: str = "auto"
    device: str = "auto"
    ray_address: str = "auto"
    seed_secret: Path | None = None
    top_k: int = 3
    prepare_ahead: bool = False
    limits: dict[str, float | int | None] = field(default_factory=dict)
    # Passes over the evaluations that hit an infrastructure fault, within this run (each
    # is retried anyway by the next run: it was not committed).
    infra_retries: int = 0


@dataclass
class RunSummary:
    """Counts and messages for the person who started the run."""

    evaluated: int = 0
    skipped_done: int = 0
    infra_errors: list[str] = field(default_factory=list)
    retried: int = 0
    messages: list[str] = field(default_factory=list)
    usable_tasks: list[str] = field(default_factory=list)
    top: list[str] = field(default_factory=list)


def make_engine(cfg: RunConfig) -> Engine:
    if cfg.engine == "local":
        return LocalEngine(cfg.workers, cfg.device, prepare_ahead=cfg.prepare_ahead)
    if cfg.engine == "ray":
        if cfg.prepare_ahead:
            raise UsageError("--prepare-ahead is for --engine local (a Ray task owns its GPU)")
        return RayEngine(cfg.ray_address, cfg.device, cfg.workers)
    raise UsageError(f"unknown engine {cfg.engine!r} (local, ray)")


SEED_META = "seed_fingerprint"


def check_seeds(state: State, secret: Secret, what: str = "this run") -> str | None:
    """Refuse (:data:`seed_secret_mismatch`) a state graded on another secret's seeds: a
    resumed run must grade on the seeds its state was graded on, never silently on new ones.
    A new state records the secret's fingerprint; one written before fingerprints were kept
    gets it now, and the returned note says that its earlier seeds cannot be checked."""
    have, mine = state.meta(SEED_META), fingerprint(secret)
    if have is None:
        state.set_meta(SEED_META, mine)
        if state.count():
            return ("this state records no seed fingerprint (written by an older kgrader): "
                    "its earlier evaluations may have used other secret seeds; from now on "
                    f"it is tied to the secret from {secret.source}")
        return None
    if have != mine:
        hint = (" (no --seed-secret and no $KGRADER_LEADERBOARD_SECRET: a random secret "
                "never matches)" if secret.source.startswith("random") else "")
        raise UsageError(f"--state {state.path} was graded on the secret seeds of another "
                         f"secret (fingerprint {have}; the secret from {secret.source} is "
                         f"{mine}){hint}: {what} would grade on other seeds. Pass the "
                         "--seed-secret it was graded with, or a new --state",
                         code="seed_secret_mismatch")
    return None


def load_tasks(cfg: RunConfig, secret: Secret | None = None) -> list[TaskPayload]:
    secret = secret or load_secret(cfg.seed_secret)
    if secret.source.startswith("random"):
        log.warning("seed_secret_random", hint="pass --seed-secret FILE or set "
                    "KGRADER_LEADERBOARD_SECRET for reproducible secret seeds")
    tasks = [task_payload(Path(t), secret) for t in cfg.tasks]
    names = [t.name for t in tasks]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise UsageError(f"two task folders define the same task name: {sorted(dup)}")
    if not tasks:
        raise UsageError("no task given (--tasks DIR ...)")
    return tasks


# Called with each committed job and its row, and whether the engine ran it on this host
# (``kgrader leaderboard run`` passes the experience store's hook).
Committed = Callable[[Job, EvalRow, bool], object]


class Batch:
    """One invocation of the batch over an open state and an engine."""

    def __init__(self, cfg: RunConfig, state: State, engine: Engine, progress: Progress,
                 on_committed: Committed | None = None):
        self.cfg, self.state, self.engine, self.progress = cfg, state, engine, progress
        self.on_committed = on_committed
        self.summary = RunSummary()
        self.failed: dict[tuple[str, str, str, str], str] = {}  # job key -> its infra error

    def _job(self, sub: str, task: TaskPayload, sha: str, rnd: str, src: str) -> Job:
        return Job(submission=sub, task=task, file_sha=sha, round=rnd, source=src,
                   backend=self.cfg.backend, device=self.cfg.device, limits=self.cfg.limits)

    def _run(self, jobs: list[Job], what: str, skip_done: bool = True) -> None:
        done = self.state.done_keys() if skip_done else set()
        # A re-run that cannot be timed is retried, and called a tie only on its last try.
        last = self.cfg.infra_retries == 0
        todo = [j if j.round != "rerun" else dataclasses.replace(j, tie_final=last)
                for j in jobs if j.key not in done]
        self.summary.skipped_done += len(jobs) - len(todo)
        log.info("batch_start", what=what, jobs=len(jobs), already_done=len(jobs) - len(todo),
                 workers=self.engine.workers, engine=self.engine.name)
        if todo:
            self.progress.start(what, len(todo))
            self.engine.run(todo, self._on_result)
            self.progress.stop()
        for attempt in range(self.cfg.infra_retries):
            last = attempt == self.cfg.infra_retries - 1
            again = [j if j.round != "rerun" else dataclasses.replace(j, tie_final=last)
                     for j in todo if j.key in self.failed]
            if not again:
                break
            self.summary.retried += len(again)
            log.info("batch_retry", what=what, jobs=len(again), attempt=attempt + 1)
            self.progress.start(f"{what} (retry {attempt + 1})", len(again))
            self.engine.run(again, self._on_result)
            self.progress.stop()
        self.summary.infra_errors += [self.failed.pop(j.key) for j in todo if j.key in self.failed]

    def _note_infra(self, job: Job, error: str | None) -> None:
        """Keep (or, once the evaluation is committed, drop) the infrastructure error that
        kept ``job`` out of the state, so that the page lists the entry with its reason
        (secret seed values redacted, as in every stored report)."""
        key = infra_key(job.submission, job.task.name, job.round)
        notes = dict(self.state.meta(INFRA_META, {}) or {})
        if error is None and key not in notes:
            return
        if error is None:
            notes.pop(key)
        else:
            notes[key] = str(redact_seeds(error[:1000], job.task.seeds))
        self.state.set_meta(INFRA_META, notes)

    def _on_result(self, job: Job, out: JobOutcome) -> None:
        self._note_infra(job, (out.infra_error or "unknown") if out.row is None else None)
        if out.row is None:
            msg = f"{job.submission}/{job.task.name} ({job.round}): not recorded, will be " \
                  f"retried next run: {out.infra_error}"
            self.failed[job.key] = msg
            log.error("evaluation_infra_error", submission=job.submission, task=job.task.name,
                      round=job.round, error=out.infra_error)
        else:
            self.failed.pop(job.key, None)
            if job.round == "reference":
                r = out.row
                self.state.record_task_check(TaskCheck(
                    name=r.task, spec_sha=job.task.spec_sha, reference_ok=r.verdict == "ok",
                    code=r.code, message=r.message, report_json=r.report_json))
            self.state.record_evaluation(out.row, replace=job.round == "reference")
            if self.on_committed is not None:  # e.g. the experience store (never raises)
                self.on_committed(job, out.row, self.engine.name == "local")
            self.summary.evaluated += 1
            log.info("evaluation_committed", submission=job.submission, task=job.task.name,
                     round=job.round, verdict=out.row.verdict, code=out.row.code,
                     speedup=out.row.speedup, wall_s=out.row.wall_s)
        self.progress.advance(job.submission, job.task.name,
                              out.row.verdict if out.row else "infra error")

    def check_references(self, tasks: list[TaskPayload]) -> list[TaskPayload]:
        """Run each task's reference as a candidate (correctness only: timing the reference
        alone proves nothing, and a timing flag on a busy machine must not drop a task).
        A pass is cached per task content; a failure is retried by every run."""
        jobs = []
        for t in tasks:
            chk = self.state.task_check(t.name, t.spec_sha)
            if chk is None or not chk.reference_ok:
                jobs.append(self._job("(reference)", t, t.spec_sha, "reference", t.reference))
        self._run(jobs, "reference checks", skip_done=False)
        usable = []
        for t in tasks:
            chk = self.state.task_check(t.name, t.spec_sha)
            if chk is not None and chk.reference_ok:
                usable.append(t)
                continue
            why = chk.message if chk else "the reference check did not finish"
            msg = f"task {t.name} skipped: its own reference fails ({why[:300]})"
            self.summary.messages.append(msg)
            log.error("task_reference_failed", task=t.name, code=chk.code if chk else None)
        return usable

    def submissions(self, names: list[str]) -> list[Submission]:
        subs, notes = discover(self.cfg.submissions, names)
        self.summary.messages += notes
        for s in subs:
            self.state.record_submission(SubmissionRow(
                name=s.name, content_sha=s.content_sha, status=s.status, message=s.message,
                duplicate_of=s.duplicate_of, files={k: v for k, v in s.file_sha.items()}))
            if s.problems:
                self.summary.messages.append(f"submission {s.name!r}: {s.message}")
                log.warning("submission_problem", submission=s.name, status=s.status,
                            problems=s.problems)
        return [s for s in subs if s.status == "valid"]

    def evaluate(self, subs: list[Submission], tasks: list[TaskPayload], rnd: str) -> None:
        jobs = []
        for s in subs:
            for t in tasks:
                if t.name in s.files:
                    src = s.files[t.name].read_bytes().decode("utf-8", "replace")
                    jobs.append(self._job(s.name, t, s.file_sha[t.name], rnd, src))
        self._run(jobs, "submissions" if rnd == "main" else "top-K re-runs")


def run_leaderboard(cfg: RunConfig, progress: Progress | None = None,
                    on_committed: Committed | None = None) -> RunSummary:
    """Run (or resume) the whole batch; every finished evaluation is committed at once,
    then handed to ``on_committed``.

    Holds the state's lock for the whole run (:func:`grader.leaderboard.state.exclusive`):
    a second run on the same state is refused before it grades anything.
    """
    check_output_file(cfg.state, "--state")
    with exclusive(cfg.state):
        return _run_locked(cfg, progress, on_committed)


def _run_locked(cfg: RunConfig, progress: Progress | None,
                on_committed: Committed | None) -> RunSummary:
    secret = load_secret(cfg.seed_secret)
    tasks = load_tasks(cfg, secret)
    # Folders (one may hold a judge's secret), containers and cgroups of a killed run.
    sweep_orphans()
    engine = make_engine(cfg)
    prog = progress or Progress(enabled=sys.stderr.isatty())
    with State.open(cfg.state) as state:
        note = check_seeds(state, secret)  # before anything is graded
        state.set_meta("tasks", [t.name for t in tasks])
        state.set_meta(SHAPES_META, shape_meta(tasks))  # the public page's redaction
        state.set_meta("top_k", cfg.top_k)
        batch = Batch(cfg, state, engine, prog, on_committed)
        if note:
            batch.summary.messages.append(note)
        try:
            usable = batch.check_references(tasks)
            batch.summary.usable_tasks = [t.name for t in usable]
            state.set_meta("usable_tasks", batch.summary.usable_tasks)
            subs = batch.submissions([t.name for t in tasks])
            batch.evaluate(subs, usable, "main")
            names = [t.name for t in usable]
            top = select_top(state.evaluations(), {s.name: s.file_sha for s in subs}, names,
                             cfg.top_k)
            batch.summary.top = top
            state.set_meta("top", top)
            batch.evaluate([s for s in subs if s.name in top], usable, "rerun")
        finally:
            prog.stop()
            close = getattr(engine, "close", None)
            if close is not None:
                close()
    return batch.summary
