"""grader/records.py and `kgrader records show`: layout, crash windows, consistency."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from grader import durable
from grader import records as records_mod
from grader.cli.records import register
from grader.errors import TaskError
from grader.records import Records, check_consistency, read_trajectory
from grader.report.model import AcceptanceResult, Report


def _task(tmp_path: Path) -> Path:
    task = tmp_path / "task"
    task.mkdir()
    (task / "task.json").write_text('{"name": "vec_add"}', encoding="utf-8")
    (task / "reference.py").write_text("def launch(a, b, out):\n    out[:] = a + b\n")
    return task


def _report(accepted: bool, improvement: float = 0.05) -> Report:
    acc = AcceptanceResult(
        accepted=accepted, rule="seed", improvement_fraction=improvement, pairs=30,
        positive_fraction=0.9, reason="test",
    )
    return Report(ok=True, stage="accept", task="vec_add", acceptance=acc)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _cli() -> click.Group:
    @click.group()
    def cli() -> None:
        pass

    register(cli)
    return cli


def test_evaluation_folder_holds_task_sources_and_report(tmp_path: Path) -> None:
    rec = Records(tmp_path / "rec")
    folder = rec.new_evaluation(_task(tmp_path), "cand = 1\n", "cur = 1\n")
    assert folder.parent == tmp_path / "rec" / "evals"
    assert sorted(p.name for p in folder.iterdir()) == [
        "candidate.py", "current.py", "reference.py", "task.json",
    ]
    assert (folder / "candidate.py").read_text() == "cand = 1\n"
    rec.finish(folder, _report(True), accepted=True)
    assert Report.model_validate_json((folder / "report.json").read_text()).task == "vec_add"
    # no staging folders or temp files left behind
    assert [p.name for p in (tmp_path / "rec" / "evals").iterdir()] == [folder.name]


def test_without_a_current_best_there_is_no_current_py(tmp_path: Path) -> None:
    folder = Records(tmp_path / "rec").new_evaluation(_task(tmp_path), "x = 1\n", None)
    assert not (folder / "current.py").exists()


def test_missing_task_files_are_a_task_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match=r"task\.json"):
        Records(tmp_path / "rec").new_evaluation(tmp_path / "empty", "x = 1\n", None)


def test_acceptance_installs_best_and_logs_the_decision(tmp_path: Path) -> None:
    root = tmp_path / "rec"
    rec = Records(root)
    task = _task(tmp_path)
    first = rec.new_evaluation(task, "v1\n", None)
    rec.finish(first, _report(True, 0.2), accepted=True)
    second = rec.new_evaluation(task, "v2\n", "v1\n")
    rec.finish(second, _report(False, 0.001), accepted=False)
    assert rec.best_path.read_text() == "v1\n"  # a rejection leaves best.py alone
    lines = [json.loads(x) for x in (root / "trajectory.jsonl").read_text().splitlines()]
    assert [x["accepted"] for x in lines] == [True, False]
    assert lines[0] == {
        "time": lines[0]["time"], "task": "vec_add", "candidate_sha256": _sha("v1\n"),
        "accepted": True, "improvement_fraction": 0.2, "rule": "seed",
        "folder": f"evals/{first.name}",
    }
    assert check_consistency(root) == []
    assert rec.best_source() == "v1\n"


def test_finish_without_a_decision_writes_no_trajectory_line(tmp_path: Path) -> None:
    rec = Records(tmp_path / "rec")
    folder = rec.new_evaluation(_task(tmp_path), "x\n", None)
    assert rec.finish(folder, Report(ok=False, stage="compile"), accepted=None) is None
    assert read_trajectory(rec.root) == []
    assert (folder / "report.json").exists()
    # accepted=None takes the verdict from the report's acceptance stage
    folder2 = rec.new_evaluation(tmp_path / "task", "y\n", None)
    entry = rec.finish(folder2, _report(True), accepted=None)
    assert entry is not None and entry.accepted
    assert rec.best_path.read_text() == "y\n"


def test_torn_final_line_is_ignored_by_readers_and_cut_by_the_next_writer(tmp_path: Path) -> None:
    root = tmp_path / "rec"
    rec = Records(root)
    folder = rec.new_evaluation(_task(tmp_path), "v1\n", None)
    rec.finish(folder, _report(True), accepted=True)
    with open(root / "trajectory.jsonl", "ab") as f:
        f.write(b'{"time": "2025-01-01", "task": "vec_ad')
    assert len(read_trajectory(root)) == 1
    assert check_consistency(root) == []
    folder2 = rec.new_evaluation(tmp_path / "task", "v2\n", None)
    rec.finish(folder2, _report(True), accepted=True)
    lines = (root / "trajectory.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x) for x in lines)
    assert check_consistency(root) == []


class _Crash(BaseException):
    """Stands in for kill -9: nothing after it runs, no cleanup handler catches it."""


def _crash_on(monkeypatch: pytest.MonkeyPatch, name: str, nth: int = 1) -> None:
    """Crash at the nth call of a durable-write step, from records.py or from grader.durable
    (where the primitives call each other), counting both together."""
    calls = {"n": 0}
    real = getattr(durable, name)

    def fake(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == nth:
            raise _Crash(name)
        return real(*args, **kwargs)

    for mod in (records_mod, durable):
        if hasattr(mod, name):
            monkeypatch.setattr(mod, name, fake)


@pytest.mark.parametrize(
    ("step", "nth", "best_after"),
    [
        ("write_fsynced", 1, "v1\n"),  # writing report.json: no commit
        ("write_fsynced", 2, "v1\n"),  # writing best.py.tmp: no commit
        ("append_line", 1, "v1\n"),  # before the commit line: no commit
        ("fsync_dir", 2, "v2\n"),  # after the rename: committed and installed
    ],
)
def test_a_crash_at_each_step_of_finish_leaves_the_records_consistent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, nth: int, best_after: str
) -> None:
    root = tmp_path / "rec"
    rec = Records(root)
    task = _task(tmp_path)
    rec.finish(rec.new_evaluation(task, "v1\n", None), _report(True), accepted=True)
    folder = rec.new_evaluation(task, "v2\n", "v1\n")
    with monkeypatch.context() as m:
        _crash_on(m, step, nth)
        with pytest.raises(_Crash):
            rec.finish(folder, _report(True), accepted=True)
    assert check_consistency(root) == []
    assert Records(root).best_source() == best_after
    assert rec.best_path.read_text() == best_after
    assert not (root / "best.py.tmp").exists()


def test_crash_between_commit_and_rename_is_committed_and_rolled_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "rec"
    rec = Records(root)
    task = _task(tmp_path)
    rec.finish(rec.new_evaluation(task, "v1\n", None), _report(True), accepted=True)
    folder = rec.new_evaluation(task, "v2\n", "v1\n")
    real_replace = os.replace

    def replace(src: object, dst: object) -> None:
        if str(dst).endswith("best.py"):
            raise _Crash("rename")
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(_Crash):
        rec.finish(folder, _report(True), accepted=True)
    monkeypatch.undo()
    # state 2: the line is committed, best.py still the previous one, best.py.tmp the new
    assert rec.best_path.read_text() == "v1\n"
    assert (root / "best.py.tmp").read_text() == "v2\n"
    assert check_consistency(root) == []
    assert rec.best_source() == "v2\n"
    Records(root)  # any writer rolls forward
    assert rec.best_path.read_text() == "v2\n"
    assert not (root / "best.py.tmp").exists()


def test_check_consistency_names_a_tampered_best_and_a_bad_line(tmp_path: Path) -> None:
    root = tmp_path / "rec"
    rec = Records(root)
    folder = rec.new_evaluation(_task(tmp_path), "v1\n", None)
    rec.finish(folder, _report(True), accepted=True)
    rec.best_path.write_text("tampered\n")
    assert any("does not match the last accepted line" in p for p in check_consistency(root))
    rec.best_path.write_text("v1\n")
    with open(root / "trajectory.jsonl", "ab") as f:
        f.write(b"not json\n")
    assert any("trajectory.jsonl:2: malformed" in p for p in check_consistency(root))


def test_check_consistency_names_a_line_whose_folder_escapes_evals(tmp_path: Path) -> None:
    root = tmp_path / "rec"
    rec = Records(root)
    line = {
        "time": "t", "task": "x", "candidate_sha256": "0" * 64, "accepted": False,
        "improvement_fraction": None, "rule": None, "folder": "../elsewhere",
    }
    with open(rec.trajectory_path, "w") as f:
        f.write(json.dumps(line) + "\n")
    assert any("not inside evals/" in p for p in check_consistency(root))


def test_check_consistency_of_a_missing_folder_is_a_problem(tmp_path: Path) -> None:
    assert check_consistency(tmp_path / "nope") != []


def test_tool_calls_are_logged_with_their_full_return(tmp_path: Path) -> None:
    rec = Records(tmp_path / "rec")
    report = _report(True)
    rec.log_tool_call("bench_kernel", {"path": Path("/x/cand.py"), "reps": 5}, report)
    rec.log_tool_call("compile_kernel", {"src": "x"}, {"ok": False, "log": "é" * 3})
    lines = [json.loads(x) for x in rec.tool_calls_path.read_text(encoding="utf-8").splitlines()]
    assert [x["name"] for x in lines] == ["bench_kernel", "compile_kernel"]
    assert lines[0]["args"] == {"path": "/x/cand.py", "reps": 5}
    assert Report.model_validate(lines[0]["result"]) == report
    assert lines[1]["result"]["log"] == "ééé"


# --- CLI ------------------------------------------------------------------------------


def test_records_show_prints_a_table_and_json(tmp_path: Path) -> None:
    root = tmp_path / "rec"
    rec = Records(root)
    task = _task(tmp_path)
    rec.finish(rec.new_evaluation(task, "v1\n", None), _report(True, 0.125), accepted=True)
    rec.finish(rec.new_evaluation(task, "v2\n", "v1\n"), _report(False, -17.09),
               accepted=False)
    runner = CliRunner()
    out = runner.invoke(_cli(), ["records", "show", str(root)])
    assert out.exit_code == 0, out.output
    assert "0.0553x" in out.output and "%" not in out.output  # a ratio, never "-1709%"
    assert "vec_add" in out.output and _sha("v1\n")[:12] in out.output and "1.14x" in out.output
    out = runner.invoke(_cli(), ["records", "show", "--json", str(root)])
    assert out.exit_code == 0
    rows = json.loads(out.output)
    assert rows[0]["candidate_sha256"] == _sha("v1\n") and rows[0]["accepted"] is True


def test_records_show_of_a_missing_folder_is_a_usage_error(tmp_path: Path) -> None:
    out = CliRunner().invoke(_cli(), ["records", "show", str(tmp_path / "nope")])
    assert out.exit_code == 2
    assert out.stderr.startswith("error: records folder not found")
