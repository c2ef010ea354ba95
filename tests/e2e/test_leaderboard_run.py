"""Leaderboard batches with real sandboxed evaluations (bwrap, CPU): kept few, each ~10 s.

* a task whose own reference fails is reported and skipped; the others run;
* a run killed with SIGKILL after its first committed result resumes without redoing
  or losing any finished evaluation;
* ``--engine ray`` on a local loopback-only Ray head gives the same verdicts as local.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.leaderboard.aggregate import board
from grader.leaderboard.state import State

from ._ray import quiet_env, start_head
from .conftest import retried

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.bwrap


def tiny_task(root: Path, name: str = "tiny_add", reference: str | None = None) -> Path:
    """vector_add_small, shrunk: few samples and pairs, so one evaluation takes seconds."""
    src = EXAMPLES / "vector_add_small"
    spec = json.loads((src / "task.json").read_text())
    spec.update(name=name, acceptance={"rule": "seed", "min_pairs": 3, "pairs": 3},
                benchmark={"warmup": 1, "samples": 3, "reps": 1, "cache": "hot"},
                shapes={"tune": [{"M": 8, "N": 256}], "hidden": [{"M": 3, "N": 100}]})
    d = root / name
    d.mkdir(parents=True)
    (d / "task.json").write_text(json.dumps(spec))
    (d / "reference.py").write_text(reference or (src / "reference.py").read_text())
    return d


def submissions(root: Path, task: str, cands: dict[str, str | Path]) -> Path:
    for name, cand in cands.items():
        (root / name).mkdir(parents=True)
        src = cand if isinstance(cand, Path) else \
            EXAMPLES / "vector_add_small" / "candidates" / f"{cand}.py"
        shutil.copy(src, root / name / f"{task}.py")
    return root


# Correct on every value the checker reads, but writes past its output on the hidden shape.
CHEAT = EXAMPLES.parent / "tests" / "attacks" / "runtime" / "unmasked_tail_store.py"


def kgrader(*args: str, env: dict[str, str] | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "KGRADER_LEADERBOARD_SECRET": "s" * 32, **(env or {})}
    p = subprocess.run([sys.executable, "-m", "grader.cli", "leaderboard", *args],
                       capture_output=True, text=True, env=e, timeout=600)
    if check:
        assert p.returncode == 0, p.stderr[-3000:]
    return p


def recorded(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``kgrader leaderboard ARGS`` run again, as an operator does, while it ends saying an
    infrastructure fault (a CPU too busy to time the tiny kernel) is retried next run: a
    little later each time, for the load to pass (four runs in a row met it beside the
    suite's own workers and two evaluations per core)."""
    p = retried(lambda: kgrader(*args, env=env, check=False),
                lambda p: p.returncode == 2 and "will be retried next run" in p.stderr,
                tries=6, wait_s=10.0)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def verdicts(state: Path) -> dict[tuple[str, str, str], tuple[str, str | None, str | None]]:
    with State.open(state, create=False) as st:
        return {(r.submission, r.task, r.round): (r.verdict, r.stage if r.verdict != "ok" else None,
                                                  r.code) for r in st.evaluations()}


BROKEN_REF = "def launch(x, y, out):\n    raise RuntimeError('the reference is broken')\n"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lb")
    return {"task": tiny_task(root / "tasks"),
            "bad_task": tiny_task(root / "tasks", "bad_ref", BROKEN_REF),
            "subs": submissions(root / "subs", "tiny_add",
                                {"good": "good", "wrong": "wrong", "cheat": CHEAT}),
            "root": root}


@pytest.fixture(scope="module")
def local_state(inputs: dict[str, Path]) -> Path:
    state = inputs["root"] / "local.sqlite"
    p = recorded("run", "--tasks", str(inputs["task"]), str(inputs["bad_task"]),
                 "--submissions", str(inputs["subs"]), "--state", str(state),
                 "--workers", "2", "--device", "cpu", "--backend", "bwrap", "--top-k", "1")
    assert "task bad_ref skipped: its own reference fails" in p.stderr
    return state


def test_failing_reference_skips_its_task_and_the_batch_goes_on(local_state: Path) -> None:
    v = verdicts(local_state)
    assert v[("(reference)", "bad_ref", "reference")][0] == "failed"
    assert not any(k[1] == "bad_ref" and k[0] != "(reference)" for k in v)
    assert v[("good", "tiny_add", "main")][0] == "ok"
    assert v[("wrong", "tiny_add", "main")] == ("failed", "correctness", "wrong_values")
    assert ("good", "tiny_add", "rerun") in v  # the top-1 entry was re-measured


def test_integrity_violation_disqualifies_the_whole_submission(local_state: Path) -> None:
    v = verdicts(local_state)
    assert v[("cheat", "tiny_add", "main")] == ("disqualified", "correctness", "out_of_bounds_write")
    with State.open(local_state, create=False) as st:
        rows = st.evaluations()
        subs = {s.name: s.files for s in st.submissions() if s.status == "valid"}
        b = board(rows, subs, ["tiny_add"], st.meta("top", []))
    assert "cheat" not in {e.submission for e in b.ranked + b.unranked}
    assert [(d.submission, d.code) for d in b.disqualified] == [("cheat", "out_of_bounds_write")]


def test_rerun_of_the_same_command_redoes_nothing(inputs: dict[str, Path], local_state: Path) -> None:
    before = {k: v for k, v in verdicts(local_state).items() if k[0] != "(reference)"}
    p = kgrader("run", "--tasks", str(inputs["task"]), str(inputs["bad_task"]),
                "--submissions", str(inputs["subs"]), "--state", str(local_state),
                "--device", "cpu", "--backend", "bwrap", "--top-k", "1")
    # Only the failing reference is checked again (failures are retried, passes cached).
    assert "evaluated 1, already done 4;" in p.stderr  # good, wrong, cheat, good re-run
    after = {k: v for k, v in verdicts(local_state).items() if k[0] != "(reference)"}
    assert after == before


def _count(state: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{state}?mode=ro", uri=True, timeout=5)
        try:
            return int(conn.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def test_sigkill_mid_run_then_restart_loses_and_redoes_nothing(tmp_path: Path) -> None:
    task = tiny_task(tmp_path / "tasks")
    subs = submissions(tmp_path / "subs", "tiny_add",
                       {"a": "good", "b": "wrong", "c": "no_mask", "d": "broken"})
    state = tmp_path / "state.sqlite"
    argv = [sys.executable, "-m", "grader.cli", "leaderboard", "run", "--tasks", str(task),
            "--submissions", str(subs), "--state", str(state), "--workers", "1",
            "--device", "cpu", "--backend", "bwrap", "--top-k", "1"]
    env = {**os.environ, "KGRADER_LEADERBOARD_SECRET": "s" * 32}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 900  # a loaded 2-core host: minutes per evaluation
    while _count(state) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with State.open(state, create=False) as st:
        before = {r.key: r.finished_at for r in st.evaluations()}
    assert 2 <= len(before) < 6, f"kill came too late to test a resume: {len(before)} rows"
    runs: list[subprocess.CompletedProcess[str]] = []

    def restart() -> subprocess.CompletedProcess[str]:
        runs.append(subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800))
        return runs[-1]

    # Again while an infrastructure fault (the tiny kernel's timing on a loaded CPU) is
    # "retried next run", as an operator does.
    p = retried(restart, lambda p: p.returncode == 2 and "will be retried next run" in p.stderr,
                tries=6, wait_s=10.0)
    assert p.returncode == 0, p.stderr[-3000:]
    with State.open(state, create=False) as st:
        after = {r.key: r.finished_at for r in st.evaluations()}
    ran = [re.search(r"evaluated (\d+),", r.stderr) for r in runs]
    assert all(ran) and sum(int(m.group(1)) for m in ran if m) == len(after) - len(before), \
        [r.stderr[-500:] for r in runs]  # only the missing ones ran
    assert {k: after[k] for k in before} == before  # finished ones kept, none redone
    subs_done = {k[0] for k in after if k[3] == "main"}
    assert subs_done == {"a", "b", "c", "d"}
    assert any(k[3] == "rerun" for k in after)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_ray_engine_gives_the_same_verdicts_as_local(inputs: dict[str, Path], local_state: Path,
                                                     tmp_path: Path) -> None:
    port = _free_port()
    env = quiet_env()
    head = start_head(port, 2, env)
    try:
        state = tmp_path / "ray.sqlite"
        recorded("run", "--tasks", str(inputs["task"]), str(inputs["bad_task"]),
                 "--submissions", str(inputs["subs"]), "--state", str(state), "--engine", "ray",
                 "--ray-address", f"127.0.0.1:{port}", "--device", "cpu", "--backend", "bwrap",
                 "--top-k", "1", env=env)
        assert verdicts(state) == verdicts(local_state)
        with State.open(state, create=False) as st:
            assert {r.engine for r in st.evaluations()} == {"ray"}
    finally:
        head.stop()


@pytest.mark.slow
def test_ray_cluster_going_away_mid_run_gives_a_clear_message_and_keeps_results(
        tmp_path: Path) -> None:
    task = tiny_task(tmp_path / "tasks")
    subs = submissions(tmp_path / "subs", "tiny_add",
                       {"a": "good", "b": "wrong", "c": "no_mask", "d": "slow", "e": "broken"})
    port = _free_port()
    env = {**quiet_env(), "KGRADER_LEADERBOARD_SECRET": "s" * 32}
    head = start_head(port, 1, env)
    state = tmp_path / "state.sqlite"
    argv = [sys.executable, "-m", "grader.cli", "leaderboard", "run", "--tasks", str(task),
            "--submissions", str(subs), "--state", str(state), "--engine", "ray",
            "--ray-address", f"127.0.0.1:{port}", "--device", "cpu", "--backend", "bwrap",
            "--top-k", "0"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 300
        while _count(state) < 1 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert _count(state) >= 1, "no result arrived before the cluster was stopped"
    finally:
        head.stop()
    with State.open(state, create=False) as st:
        finished = {r.key: r.finished_at for r in st.evaluations()}
    try:
        _, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the driver hung after the Ray cluster went away")
    # Stopped after the first of five results: the run cannot have finished on its own.
    assert proc.returncode == 2, err[-3000:]
    assert "ray" in err.lower() and "Traceback" not in err, err[-3000:]
    with State.open(state, create=False) as st:
        after = {r.key: r.finished_at for r in st.evaluations()}
    assert {k: after[k] for k in finished} == finished  # nothing finished was lost
