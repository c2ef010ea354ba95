"""``kgrader replay``: grade a recorded result again -- a leaderboard row (``replay row``)
or a service job (``replay job``) -- with the same seeds, policy and versions, and say
whether its verdict holds (:mod:`grader.leaderboard.replay`).

Exit codes: 0 the verdict holds; 1 it does not (the replay's verdict or code differs);
2 nothing was replayed (a file, task, secret or job that is not the recorded one, or an
infrastructure fault); 130/143 interrupted. ``--json``: one document on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from grader.backends.registry import backend_choices
from grader.backends.select import detect_device
from grader.cli.common import fail
from grader.errors import InfrastructureError, KgraderError, UsageError
from grader.leaderboard.replay import Replay, compare_versions, recorded_facts
from grader.leaderboard.seeds import Secret, load_secret
from grader.report.model import Report
from grader.service.store import Store
from grader.service.worker import Slot, build_request, grade, load_tasks, verdict


def replay_job(store_target: str | Path, job_id: str, tasks_dir: Path, secret: Secret,
               backend: str = "auto", device: str = "auto") -> Replay:
    """Grade one finished service job again (its stored source, the server's task and
    secret); an ``accept`` job is refused (the best it was paired with is not kept)."""
    store = Store(store_target)
    job, source = store.job(job_id), store.source(job_id)
    if job is None or source is None:
        raise UsageError(f"no job {job_id!r} in {store.where}", code="replay_mismatch")
    if job.state != "done" or job.verdict is None:
        raise UsageError(f"job {job_id} is {job.state}: only a graded job can be replayed",
                         code="replay_mismatch")
    if job.mode == "accept":
        raise UsageError("an accept job is paired with the best of its time, which the store "
                         "does not keep: replay it with `kgrader run --current`",
                         code="replay_mismatch")
    tasks = load_tasks(tasks_dir, secret)
    task = tasks.get(job.task)
    if task is None:
        raise UsageError(f"{tasks_dir} holds no task {job.task!r}", code="replay_mismatch")
    notes: list[str] = []
    compare_versions(recorded_facts(store.report_json(job_id))[1], notes)
    dev = detect_device() if device == "auto" else device
    req = build_request(job.mode, source, task, Slot("replay", backend, dev), job.id, None)
    report = grade(req.model_copy(update={"build_cache": False}))  # an independent grade
    if report.infrastructure_failed():
        e = next(e for e in report.errors if e.origin == "infrastructure")
        raise InfrastructureError(f"the replay could not grade it: {e.code}: {e.message}")
    v = verdict(job.mode, report)
    code = report.errors[0].code if report.errors else None
    rec_code = None
    try:
        rec = Report.model_validate_json(store.report_json(job_id) or "")
        rec_code = rec.errors[0].code if rec.errors else None
    except ValueError:
        notes.append("the recorded report is unreadable")
    return Replay(f"service job {job_id} ({job.mode}, {job.task})", job.verdict, rec_code, v,
                  code, notes=notes)


def _say(r: Replay, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2, ensure_ascii=False))
    else:
        for n in r.notes:
            click.echo(f"note: {n}", err=True)
        head = "the verdict holds" if r.holds else "the verdict does NOT hold"
        click.echo(f"{r.what}: {head}: recorded {r.recorded_verdict}"
                   f"{' (' + r.recorded_code + ')' if r.recorded_code else ''}, replayed "
                   f"{r.verdict}{' (' + r.code + ')' if r.code else ''}"
                   + (f"; speed-up recorded {r.recorded_speedup:.3g}x, replayed "
                      f"{r.speedup:.3g}x" if r.recorded_speedup and r.speedup else ""))
    sys.exit(0 if r.holds else 1)


_secret = click.option("--seed-secret", type=click.Path(path_type=Path), default=None,
                       help="The secret the result was graded with (else "
                            "$KGRADER_LEADERBOARD_SECRET).")
_backend = click.option("--backend", type=click.Choice(backend_choices()), default="auto",
                        show_default=True)
_device = click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
                       show_default=True)
_json = click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")


def _given_secret(path: Path | None) -> Secret:
    secret = load_secret(path)
    if secret.source.startswith("random"):
        raise UsageError("replay needs the secret the result was graded with: pass "
                         "--seed-secret FILE or set $KGRADER_LEADERBOARD_SECRET",
                         code="seed_secret_mismatch")
    return secret


def register(cli: click.Group) -> None:
    """Add the ``replay`` group to the main CLI."""

    @cli.group()
    def replay() -> None:
        """Grade a recorded result again and say whether its verdict holds."""

    @replay.command("row")
    @click.option("--state", type=click.Path(path_type=Path), required=True,
                  help="The leaderboard state holding the row.")
    @click.option("--submission", required=True, help="The row's submission name.")
    @click.option("--round", "rnd", type=click.Choice(["main", "rerun"]), default="main",
                  show_default=True)
    @click.argument("task_dir", type=click.Path(path_type=Path))
    @click.argument("file", type=click.Path(path_type=Path))
    @_secret
    @_backend
    @_device
    @_json
    def row_cmd(state: Path, submission: str, rnd: str, task_dir: Path, file: Path,
                seed_secret: Path | None, backend: str, device: str, as_json: bool) -> None:
        """Replay the row of SUBMISSION on TASK_DIR's task, graded from FILE."""
        from grader.leaderboard.replay import replay_row

        try:
            r = replay_row(state, submission, task_dir, file, _given_secret(seed_secret), rnd,
                           backend, device)
        except KgraderError as e:
            fail(e)
        _say(r, as_json)

    @replay.command("job")
    @click.option("--data", type=click.Path(path_type=Path), required=True,
                  help="The server's --data folder (its store and, unless given, its secret).")
    @click.option("--tasks", "tasks_dir", type=click.Path(path_type=Path), required=True,
                  help="The server's --tasks folder.")
    @click.argument("job_id")
    @_secret
    @_backend
    @_device
    @_json
    def job_cmd(data: Path, tasks_dir: Path, job_id: str, seed_secret: Path | None, backend: str,
                device: str, as_json: bool) -> None:
        """Replay the service job JOB_ID."""
        kept = data / "seed-secret"
        try:
            secret = _given_secret(seed_secret or (kept if kept.exists() else None))
            r = replay_job(data / "service.sqlite", job_id, tasks_dir, secret, backend, device)
        except KgraderError as e:
            fail(e)
        _say(r, as_json)
