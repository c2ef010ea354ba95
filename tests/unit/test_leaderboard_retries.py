"""A batch retries, within the run, the evaluations that hit an infrastructure fault
(``RunConfig.infra_retries``): what passes on a retry is committed and no longer an error;
what still fails is reported, uncommitted, for the next run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from grader.leaderboard.engine import OnResult
from grader.leaderboard.job import Job, JobOutcome
from grader.leaderboard.progress import Progress
from grader.leaderboard.runner import Batch, RunConfig
from grader.leaderboard.seeds import TaskPayload
from grader.leaderboard.state import EvalRow, State

SHA = "f" * 64


class ScriptedEngine:
    """Fails each named submission's first ``fails[name]`` evaluations with an infra error."""

    name = "local"
    workers = 1

    def __init__(self, fails: dict[str, int]):
        self.fails = dict(fails)
        self.passes: list[list[str]] = []

    def run(self, jobs: Sequence[Job], on_result: OnResult) -> None:
        self.passes.append([j.submission for j in jobs])
        for j in jobs:
            if self.fails.get(j.submission, 0) > 0:
                self.fails[j.submission] -= 1
                on_result(j, JobOutcome(None, "timing_unreliable: a loaded host"))
            else:
                on_result(j, JobOutcome(EvalRow(
                    submission=j.submission, task="t", file_sha=SHA, round="main", verdict="ok",
                    stage="accept", code=None, message="correct", speedup=1.0,
                    speedup_source="pairs", t_sub_ms=1.0, report_json=None, wall_s=1.0,
                    engine="local")))


def _jobs() -> list[Job]:
    task = TaskPayload(name="t", task_json="{}", reference="", seeds=(7,))
    return [Job(submission=s, task=task, file_sha=SHA, round="main", source="x = 1\n")
            for s in ("a", "b", "c")]


@pytest.mark.parametrize("retries,fails,passes,committed,errors,retried", [
    (0, {"b": 1}, [["a", "b", "c"]], 2, ["b"], 0),            # the old behaviour: next run
    (2, {"b": 1}, [["a", "b", "c"], ["b"]], 3, [], 1),        # passes on its first retry
    (2, {"b": 5, "c": 1}, [["a", "b", "c"], ["b", "c"], ["b"]], 2, ["b"], 3),  # b never does
])
def test_infrastructure_faults_are_retried_within_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, retries: int, fails: dict[str, int],
        passes: list[list[str]], committed: int, errors: list[str], retried: int) -> None:
    monkeypatch.setenv("KGRADER_EXPERIENCE", str(tmp_path / "exp.sqlite"))
    engine = ScriptedEngine(fails)
    with State.open(tmp_path / "lb.sqlite") as st:
        batch = Batch(RunConfig(tasks=[], submissions=tmp_path, infra_retries=retries), st,
                      engine, Progress(enabled=False))
        batch._run(_jobs(), "submissions")
        assert engine.passes == passes
        assert st.count() == committed
        assert [m.split("/")[0] for m in batch.summary.infra_errors] == errors
        assert all("timing_unreliable" in m for m in batch.summary.infra_errors)
        assert batch.summary.retried == retried
