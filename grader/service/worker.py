"""Workers: each claims the oldest queued job, grades it, and records the result once.

Every evaluation goes through one function, :func:`grade` (``EvalRequest -> Report``):
today the cold path (:func:`grader.evaluate.evaluate`, as the agent tools call it); a
warm pool of single-use sandboxes replaces it there, or is passed to :class:`Workers`
as ``grader``. One worker per GPU (each with that GPU's id); on the CPU a configured
count.

What a job's mode grades (the server's own copy of the task, never a client's path):

* ``run``: compile, correctness (tune and hidden shapes), benchmark -- ``kgrader run``;
* ``test``: compile and correctness only, no benchmark (popcorn's ``--mode test``);
* ``bench``: the same, paired with the task's trusted reference (``bench_kernel``);
* ``accept``: paired, interleaved against the task's current best on this server; an
  accepted candidate becomes the best (with no best yet: accepted when it passes);
* ``leaderboard``: a leaderboard entry -- the task with the server's secret seeds,
  paired with the reference, the row committed to the live board;
* ``rerun`` (never a client's: the board queues it, :mod:`grader.service.board`): an
  entry's best file graded again as ``leaderboard`` does, correctness under the memory
  checker as the batch's re-run; its figure is the one the board ranks. A board job (entry
  or re-run) that the host still could not time on its last attempt is a result: correct,
  no speed-up ("tied within noise", :func:`grader.leaderboard.job.tied_within_noise`), not
  an infrastructure fault. On a 2-core CPU the reference of vector_add_small (a torch add)
  sits inside the judge clock's noise, and an honest entry failed all six attempts idle.

A report whose errors are the infrastructure's is not a result: the job is re-queued
(up to ``max_attempts`` claims), then ``failed``. Each retry waits longer than the last
(:func:`retry_delay`): what spoils a run on a loaded machine (``timing_unreliable``, a judge
killed from outside) tends to last a while, and an immediate second claim meets it again. A
candidate's failure is a result (``done``, verdict ``failed``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.errors import InfrastructureError, KgraderError, TaskError, UsageError
from grader.evaluate import EvalRequest, Source, evaluate
from grader.leaderboard.job import classify, classify_rerun, redact_seeds, tied_within_noise
from grader.leaderboard.seeds import Secret, TaskPayload, task_payload
from grader.logs import get_logger, on_step
from grader.report.model import Report
from grader.scan import check_source
from grader.service.store import BestChanged, Claimed, Store
from grader.task import TaskSpec, load_task
from sandbox.contract import codes

log = get_logger("kgrader.service")
MODES = ("run", "test", "bench", "accept", "leaderboard")  # what a client may submit
RERUN = "rerun"  # the board's own re-run of an entry (never a client's)
BOARD_MODES = ("leaderboard", RERUN)
MAX_RETRY_DELAY_S = 300.0
Grader = Callable[[EvalRequest], Report]


def retry_delay(attempt: int, base_s: float) -> float:
    """Seconds a job waits after its ``attempt``-th claim failed on the infrastructure:
    ``base_s`` doubled per claim so far, at most :data:`MAX_RETRY_DELAY_S`."""
    return min(base_s * 2.0 ** max(attempt - 1, 0), MAX_RETRY_DELAY_S) if base_s > 0 else 0.0


def grade(request: EvalRequest) -> Report:
    """The one call the service grades through (the seam for the warm pool)."""
    return evaluate(request)


@dataclass(frozen=True)
class ServiceTask:
    """A task the server was started with: its spec and reference, and the secret-seeded
    payload leaderboard entries are graded on."""

    name: str
    spec: TaskSpec
    reference: str
    payload: TaskPayload


def load_tasks(tasks_dir: Path, secret: Secret) -> dict[str, ServiceTask]:
    """Every task folder directly under ``tasks_dir`` (a folder holding ``task.json``)."""
    if not tasks_dir.is_dir():
        raise UsageError(f"--tasks {tasks_dir}: not a folder of task folders")
    out: dict[str, ServiceTask] = {}
    for d in sorted(p for p in tasks_dir.iterdir() if (p / "task.json").is_file()):
        spec, reference = load_task(d)
        if spec.name in out:
            raise TaskError(f"two task folders under {tasks_dir} define task {spec.name!r}")
        out[spec.name] = ServiceTask(spec.name, spec, reference, task_payload(d, secret))
    if not out:
        raise UsageError(f"--tasks {tasks_dir}: no task folder (a folder with task.json) in it")
    return out


@dataclass(frozen=True)
class Slot:
    """Where one worker grades: its name, backend, device and GPU ids."""

    name: str
    backend: str
    device: str
    gpu_ids: tuple[str, ...] = ()


def build_request(mode: str, source: str, task: ServiceTask, slot: Slot, job_id: str,
                  best: str | None) -> EvalRequest:
    """The in-memory request for one job of ``mode`` (see the module docstring)."""
    cand = Source(name=f"{job_id}.py", text=check_source(source, job_id))
    ref = Source(name="reference.py", text=task.reference)
    common = {"reference": task.reference, "candidate": cand, "backend": slot.backend,
              "device": slot.device, "gpu_ids": slot.gpu_ids}
    if mode == "run":
        return EvalRequest(task=task.spec, **common)
    if mode == "test":
        return EvalRequest(task=task.spec, stages=("compile", "correctness"), **common)
    if mode == "bench":
        return EvalRequest(task=task.spec, current=ref, current_trusted=True,
                           **common)
    if mode == "accept":
        cur = None if best is None else Source(name="current.py", text=best)
        return EvalRequest(task=task.spec, current=cur, **common)
    if mode in BOARD_MODES:
        spec = TaskSpec.model_validate_json(task.payload.task_json)
        return EvalRequest(task=spec, current=ref, current_trusted=True,
                           shape_seed=task.payload.shape_seed,
                           sanitize="default" if mode == RERUN else None, **common)
    raise UsageError(f"unknown mode {mode!r}")


def verdict(mode: str, report: Report) -> str:
    """The job's one-word verdict: ``passed``/``failed`` (run, test, bench), ``accepted``/
    ``rejected``/``failed`` (accept), the leaderboard's (``ok``, ``failed``, ``anomaly``,
    ``disqualified``)."""
    passed = (not report.errors and report.correctness is not None
              and report.correctness.passed and report.timing is not None)
    if mode in BOARD_MODES and tied_within_noise(report):  # only a last attempt gets here
        return classify_rerun(report)[0]
    if mode in BOARD_MODES:
        return classify(report)[0]
    if mode == "test":
        correct = report.correctness is not None and report.correctness.passed
        return "passed" if not report.errors and correct else "failed"
    if mode == "accept":
        if not passed:
            return "failed"
        acc = report.acceptance
        return "accepted" if acc is None or acc.accepted else "rejected"
    return "passed" if passed else "failed"


BoardHook = Callable[[str], None]  # a finished leaderboard job's id


class Workers:
    """Threads that drain the queue; :meth:`wake` after a submission."""

    # Whether a cancelled running job's sandbox is killed here (its request carries the
    # event); Ray workers ship the request to a node, where no event of this process reaches.
    kills_on_cancel = True

    def __init__(self, store: Store, tasks: dict[str, ServiceTask], slots: list[Slot],
                 *, grader: Grader = grade, max_attempts: int = 4, retry_backoff_s: float = 10.0,
                 on_leaderboard: BoardHook | None = None):
        self.store, self.tasks, self.slots = store, tasks, slots
        self.grader, self.max_attempts, self.on_leaderboard = grader, max_attempts, on_leaderboard
        self.retry_backoff_s = retry_backoff_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._cancels: dict[str, threading.Event] = {}  # running job -> its sandbox's stop
        self._cancels_lock = threading.Lock()

    def cancel(self, job_id: str) -> bool:
        """Kill the sandbox grading ``job_id`` here, if one is (the store has already marked
        the job cancelled, so its grade is not recorded); whether one was."""
        with self._cancels_lock:
            ev = self._cancels.get(job_id)
        if ev is not None:
            ev.set()
        return ev is not None

    def start(self) -> None:
        for slot in self.slots:
            t = threading.Thread(target=self._loop, args=(slot,), name=f"kgrader-{slot.name}",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def wake(self) -> None:
        self._wake.set()

    def ready(self, slot: Slot) -> bool:
        """Whether ``slot`` may claim a job now (always, here; a Ray cluster that went
        away says no: grader.service.ray_workers)."""
        return True

    def health(self) -> dict[str, Any]:
        """What ``/v1/health`` adds about the workers (nothing, here)."""
        return {}

    def halt(self) -> None:
        """No new claims, and a job graded from now on is not recorded: it stays
        ``running`` and the next start re-runs it (a stop signal calls this before the
        sandboxes are killed, so a killed sandbox is never taken for a result)."""
        self._stop.set()
        self._wake.set()

    def stop(self, timeout: float = 1.0) -> None:
        """:meth:`halt`, then wait at most ``timeout`` seconds in all for the threads (they
        are daemons: one still unwinding a killed sandbox does not hold the exit)."""
        self.halt()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(deadline - time.monotonic(), 0.0))

    def _loop(self, slot: Slot) -> None:
        while not self._stop.is_set():
            try:
                claimed = self.store.claim(slot.name) if self.ready(slot) else None
                if claimed is not None:
                    self.run_one(claimed, slot)
                    continue
            except Exception:  # the store is unreachable or busy: the worker waits, never dies
                log.exception("service_worker_store_error", worker=slot.name)
                self._stop.wait(2.0)
                continue
            self._wake.wait(0.5)
            self._wake.clear()

    def run_one(self, c: Claimed, slot: Slot) -> None:
        """Grade one claimed job and record its outcome (only the store's errors escape:
        the job then stays ``running`` and the next start re-queues it)."""
        job = c.job
        task = self.tasks.get(job.task)
        report: Report | None = None
        problem: str | None = None
        try:
            if task is None:  # the server was restarted without this task
                raise UsageError(f"task {job.task!r} is not served any more")
            entry = self.store.best_entry(job.task) if job.mode == "accept" else None
            best, best_was = (entry[1], entry[0]) if entry else (None, "")
            req = build_request(job.mode, c.source, task, slot, job.id, best)
            stop = threading.Event()
            with self._cancels_lock:
                self._cancels[job.id] = stop
            try:
                if self.kills_on_cancel:  # a local sandbox: killed on cancel
                    req = req.model_copy(update={"cancel": stop})
                with on_step(self._steps(c)):  # the judge's steps, live, as the job's events
                    report = self.grader(req)
            finally:
                with self._cancels_lock:
                    self._cancels.pop(job.id, None)
            # A board job the host cannot time is retried like any spoiled grade, and called
            # a tie only on its last attempt (under load every first try could be a tie).
            tied = job.mode in BOARD_MODES and tied_within_noise(report) \
                and c.attempt >= self.max_attempts
            # In "bench" the pair with the trusted reference only measures: its spoiled
            # timing leaves the candidate's own stages standing (the agent tool says the
            # speed-up is unmeasured, grader.agent.tools.bench_kernel), never a failed job.
            spoiled = [e for e in report.errors if codes.retried(e.code, e.origin)
                       and not (job.mode == "bench" and e.stage == "accept")]
            if spoiled and not tied:
                problem = f"{spoiled[0].code}: {spoiled[0].message}"
        except InfrastructureError as e:
            problem = f"{e.code}: {e}"
        except KgraderError as e:  # the candidate's or the job's own fault: a result
            self._finish(c, "done", "failed", None, f"{e.code}: {e}")
            return
        except Exception as e:  # a kgrader bug: never kills the worker
            log.exception("service_grade_bug", job=job.id)
            problem = f"internal error: {type(e).__name__}: {e}"
        if self._stop.is_set():
            return  # shutting down: the sandbox may have been stopped under it; re-run later
        if problem is not None or report is None or task is None:
            why = problem or "no report"
            delay = retry_delay(c.attempt, self.retry_backoff_s)
            if c.attempt < self.max_attempts and self.store.requeue(job.id, c.attempt, why, delay):
                log.warning("service_job_requeued", job=job.id, attempt=c.attempt, error=why,
                            delay_s=round(delay, 1))
                return
            self._finish(c, "failed", None, None, why)
            return
        v = verdict(job.mode, report)
        text = report.model_dump_json()
        if job.mode in BOARD_MODES:
            text = json.dumps(redact_seeds(json.loads(text), task.payload.seeds))
        best_source = c.source if job.mode == "accept" and v == "accepted" else None
        try:
            recorded = self._finish(c, "done", v, text, None, best_source, best_was)
        except BestChanged as e:  # graded against a best another accept replaced: again
            why = f"graded again against the new best ({e})"
            if self.store.requeue(job.id, c.attempt, why):
                log.info("service_job_regraded", job=job.id, why=why)
            return
        if recorded and job.mode in BOARD_MODES and self.on_leaderboard is not None:
            try:
                self.on_leaderboard(job.id)
            except Exception:  # the board is a view of the store: a restart syncs it
                log.exception("service_board_update_failed", job=job.id)

    def _steps(self, c: Claimed) -> Callable[[str, Mapping[str, Any]], None]:
        """A step listener that records each step as a ``step`` event of the job (plain
        values only); a write that fails is dropped: progress never fails a grade."""
        def record(name: str, fields: Mapping[str, Any]) -> None:
            data = {k: v for k, v in fields.items()
                    if v is None or isinstance(v, (str, int, float, bool))}
            try:
                self.store.add_step(c.job.id, c.attempt, {**data, "step": name,
                                                          "attempt": c.attempt})
            except Exception as e:
                log.info("service_step_dropped", job=c.job.id, step=name, error=repr(e))
        return record

    def _finish(self, c: Claimed, state: str, v: str | None, report_json: str | None,
                error: str | None, best_source: str | None = None, best_was: str = "") -> bool:
        ok = self.store.finish(c.job.id, c.attempt, state=state, verdict=v,
                               report_json=report_json, error=error, best_source=best_source,
                               best_was=best_was)
        log.info("service_job_finished", job=c.job.id, state=state, verdict=v, recorded=ok)
        return ok
