"""grader/experience: caps, schema versioning, bad files, concurrency, imports and hooks.

Real SQLite files in tmp_path; reports are built by hand (pure data, no sandbox).
"""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from grader.experience import schema
from grader.experience.extract import attempt_from_report, report_key
from grader.experience.hooks import remember_leaderboard, remember_records_folder
from grader.experience.importers import import_path
from grader.experience.model import (
    MAX_ERRORS,
    MAX_MESSAGE_BYTES,
    MAX_SOURCE_BYTES,
    Attempt,
    ErrorItem,
    ExperienceError,
    ExperienceSchemaError,
    cap_text,
)
from grader.experience.query import Query
from grader.experience.store import ExperienceStore, default_path
from grader.grading.redact import facts_for, redact
from grader.records import Records
from grader.report.model import (
    BadElement,
    CorrectnessResult,
    Report,
    ReportError,
    SandboxInfo,
    TimingStats,
)

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "examples" / "softmax"
ENV = {"device_name": "x86_64", "torch": "2.13.0+cpu", "triton": "3.9.0", "python": "3.11.7"}


def wrong_report(n: int = 1000, created: str = "2026-01-01T00:00:00+00:00") -> Report:
    bad = BadElement(tensor="out", index=[0, n - 1], expected=1.0, actual=None, dims={"M": 7, "N": n},
                     seed=None, shape_kind="hidden")
    return Report(
        ok=False, stage="correctness", task="softmax", device="cpu: x86_64", environment=ENV,
        errors=[ReportError(origin="candidate", stage="correctness", code="output_untouched",
                           message=f"output 'out' left unwritten at index [0, {n - 1}]",
                           detail={"first_bad": bad.model_dump()})],
        correctness=CorrectnessResult(passed=False, checks=1, mismatch_fraction=0.001, first_bad=bad),
        sandbox=SandboxInfo.model_validate({"backend": "bwrap", "limits": {}}), created_at=created)


def good_report(median: float = 1.0, created: str = "2026-01-02T00:00:00+00:00") -> Report:
    t = TimingStats(samples=5, mean_ms=median, median_ms=median, p95_ms=median, std_ms=0.0,
                    min_ms=median, cv=0.0, bandwidth_gbps=2.0, device="cpu", clock="perf_counter", mode="perf_counter",
                    cache="cold", dims={"M": 64, "N": 256})
    return Report(ok=True, stage="benchmark", task="softmax", device="cpu: x86_64", environment=ENV,
                  correctness=CorrectnessResult(passed=True, checks=3), timing=t,
                  sandbox=SandboxInfo.model_validate({"backend": "bwrap", "limits": {}}),
                  created_at=created)


def _attempt(report: Report, source: str = "def launch(x, out):\n    pass\n") -> Attempt:
    return attempt_from_report(report, origin="run", task=json.loads((SOFTMAX / "task.json").read_text()),
                               source=source, host_cpu_model="Test CPU")


# --- caps -----------------------------------------------------------------------------


def test_cap_text_cuts_on_a_character_boundary_and_marks_the_cut() -> None:
    text, cut = cap_text("é" * 100, 51)
    assert cut and len(text.encode()) <= 51 and text.endswith("[truncated]")
    assert cap_text("short", 10) == ("short", False)
    assert cap_text("a\x00b", 10) == ("a\\0b", False)  # NUL is shown, never stored
    assert cap_text("\udcff", 10)[0] == "?"  # a lone surrogate cannot be stored as UTF-8


def test_source_messages_and_error_count_are_capped_when_stored(tmp_path: Path) -> None:
    huge = "x = 1  # " + "y" * (MAX_SOURCE_BYTES * 2)
    # The report allows 4000 characters; in two-byte characters that is twice the byte cap.
    many = [ReportError(origin="candidate", stage="compile", code=f"e{i}", message="é" * 3999)
            for i in range(MAX_ERRORS + 10)]
    report = wrong_report().model_copy(update={"errors": many, "warnings": ["w" * 10_000] * 40})
    a = replace(_attempt(report, huge), tags=tuple(f"t{i}" for i in range(40)))
    with ExperienceStore.open(tmp_path / "x.sqlite") as store:
        assert store.add(a)
        (hit,) = store.query(Query())
        stored = hit.attempt
        raw_source = store.conn.execute("SELECT length(CAST(source AS BLOB)) FROM attempts").fetchone()[0]
        raw_msgs = store.conn.execute("SELECT MAX(length(CAST(message AS BLOB))) FROM attempt_errors").fetchone()[0]
        n_errors = store.conn.execute("SELECT COUNT(*) FROM attempt_errors").fetchone()[0]
    assert raw_source <= MAX_SOURCE_BYTES and stored.source_truncated
    assert stored.source is not None and stored.source.startswith("x = 1")
    assert raw_msgs <= MAX_MESSAGE_BYTES and n_errors == MAX_ERRORS
    assert len(stored.warnings) == 16 and all(len(w.encode()) <= MAX_MESSAGE_BYTES for w in stored.warnings)
    assert len(stored.tags) == 16


# --- round trip, identity ---------------------------------------------------------------


def test_attempt_round_trips_and_the_same_report_is_stored_once(tmp_path: Path) -> None:
    a = _attempt(wrong_report())
    with ExperienceStore.open(tmp_path / "x.sqlite") as store:
        assert store.add(a) is True
        assert store.add(a) is False
        (hit,) = store.query(Query(task="softmax"))
    b = hit.attempt
    # What is stored is the candidate-facing copy: no hidden shape, no text from a run on one.
    public = redact(wrong_report(), facts_for(json.loads((SOFTMAX / "task.json").read_text())))
    assert b.key == report_key(public) and b.tags == ("reduction", "softmax")
    assert b.dtypes == ("float32",) and b.stage == "correctness" and b.ok is False
    assert b.errors == (ErrorItem("correctness", "output_untouched", public.errors[0].message),)
    assert "hidden shape #1" in b.errors[0].message and "999" not in b.errors[0].message
    assert {s.kind for s in b.shapes} == {"tune"}
    assert b.figures["first_bad"]["dims"] == {"hidden_shape": 1} and b.figures["first_bad"]["index"] == []
    assert b.hardware is not None and "Test CPU" in b.hardware and "torch 2.13.0+cpu" in b.hardware
    assert b.source == a.source


def test_task_without_tags_falls_back_to_its_name(tmp_path: Path) -> None:
    task = json.loads((SOFTMAX / "task.json").read_text())
    del task["tags"]
    a = attempt_from_report(wrong_report(), origin="run", task=task, source=None)
    assert a.tags == ("softmax",)
    assert attempt_from_report(wrong_report(), origin="run", task=None, source=None).tags == ("softmax",)


def test_diagnostics_can_be_added_later_and_are_searchable(tmp_path: Path) -> None:
    a = _attempt(good_report())
    with ExperienceStore.open(tmp_path / "x.sqlite") as store:
        store.add(a)
        assert store.query(Query(text="occupancy")) == []
        assert store.add_diagnostics(a.key, "low occupancy: 12 registers spilled")
        assert not store.add_diagnostics("no-such-key", "x")
        (hit,) = store.query(Query(text="occupancy"))
    assert hit.attempt.diagnostics.endswith("low occupancy: 12 registers spilled")


def test_sandbox_output_is_not_kept_so_it_cannot_leak_hidden_shapes(tmp_path: Path) -> None:
    # A candidate can print the shapes it was launched on; agents search the stored text.
    sb = SandboxInfo.model_validate({"backend": "bwrap", "limits": {}, "stderr_tail": "saw N=1000 zebra"})
    a = _attempt(wrong_report().model_copy(update={"sandbox": sb}))
    assert "zebra" not in a.diagnostics and "zebra" not in str(a.figures)
    with ExperienceStore.open(tmp_path / "x.sqlite") as store:
        store.add(a)
        assert store.query(Query(text="zebra")) == []


# --- files that are not (our) stores --------------------------------------------------


def test_missing_store_is_a_typed_error_and_is_not_created(tmp_path: Path) -> None:
    p = tmp_path / "nope.sqlite"
    with pytest.raises(ExperienceError, match="no experience store"):
        ExperienceStore.open(p, create=False)
    assert not p.exists()
    with pytest.raises(ExperienceError, match="directory"):
        ExperienceStore.open(tmp_path, create=True)


def test_corrupted_file_is_refused_untouched(tmp_path: Path) -> None:
    p = tmp_path / "bad.sqlite"
    junk = b"this is not sqlite\x00" * 200
    p.write_bytes(junk)
    for create in (False, True):
        with pytest.raises(ExperienceError, match="not a readable kgrader experience store"):
            ExperienceStore.open(p, create=create)
    assert p.read_bytes() == junk


def test_foreign_sqlite_file_is_refused_untouched(tmp_path: Path) -> None:
    p = tmp_path / "other.sqlite"
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE people (name TEXT)")
    conn.commit()
    conn.close()
    before = p.read_bytes()
    with pytest.raises(ExperienceError, match="not a kgrader experience store"):
        ExperienceStore.open(p)
    assert p.read_bytes() == before


def test_newer_schema_version_is_a_clear_error_and_the_file_is_untouched(tmp_path: Path) -> None:
    p = tmp_path / "x.sqlite"
    ExperienceStore.open(p).close()
    conn = sqlite3.connect(p)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(schema.SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    before = p.read_bytes()
    with pytest.raises(ExperienceSchemaError, match="newer than the version"):
        ExperienceStore.open(p)
    assert p.read_bytes() == before


def test_meta_records_version_and_text_index(tmp_path: Path) -> None:
    with ExperienceStore.open(tmp_path / "x.sqlite") as store:
        meta = dict(store.conn.execute("SELECT key, value FROM meta").fetchall())
        mode = store.conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert meta["schema_version"] == str(schema.SCHEMA_VERSION)
    assert meta["text_index"] == ("fts5" if schema.fts5_available() else "like")
    assert mode == "wal"


def test_store_with_fts5_index_is_read_with_like_and_not_written_without_fts5(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not schema.fts5_available():
        pytest.skip("this SQLite has no FTS5: the fallback is the only mode (tested below)")
    p = tmp_path / "x.sqlite"
    with ExperienceStore.open(p) as store:
        store.add(_attempt(wrong_report()))
    monkeypatch.setattr(schema, "fts5_available", lambda: False)
    with ExperienceStore.open(p) as store:
        assert store.text_index == "fts5" and not store.fts
        assert len(store.query(Query(text="withheld"))) == 1  # LIKE over the same columns
        with pytest.raises(ExperienceError, match="no FTS5 module"):
            store.add(_attempt(good_report()))


def test_default_path_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KGRADER_EXPERIENCE", str(tmp_path / "e.sqlite"))
    assert default_path() == tmp_path / "e.sqlite"
    monkeypatch.setenv("KGRADER_EXPERIENCE", "off")
    with pytest.raises(ExperienceError, match="switched off"):
        default_path()
    monkeypatch.delenv("KGRADER_EXPERIENCE")
    assert default_path() == Path.home() / ".cache" / "kgrader" / "experience.sqlite"


# --- concurrency ------------------------------------------------------------------------


def _writer(args: tuple[str, int, int]) -> int:
    path, worker, n = args
    added = 0
    for i in range(n):
        report = good_report(median=1.0 + worker + i / 1000, created=f"2026-02-01T00:{worker:02d}:{i % 60:02d}+00:00")
        with ExperienceStore.open(path) as store:
            added += store.add(_attempt(report, f"# worker {worker} attempt {i}\n"))
    return added


def test_concurrent_writer_processes_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "x.sqlite")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        added = pool.map(_writer, [(path, w, 15) for w in range(4)])
    assert added == [15, 15, 15, 15]
    with ExperienceStore.open(path, create=False) as store:
        assert store.count() == 60
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# --- imports and hooks ------------------------------------------------------------------


def test_records_folder_import_reads_finished_evaluations_once(tmp_path: Path) -> None:
    rec = Records(tmp_path / "rec")
    f1 = rec.new_evaluation(SOFTMAX, "# wrong\n", None)
    rec.finish(f1, wrong_report(), None)  # finish feeds no store: only the import sees it
    rec.new_evaluation(SOFTMAX, "# never finished\n", None)
    db = tmp_path / "x.sqlite"
    with ExperienceStore.open(db) as store:
        first = import_path(store, tmp_path / "rec")
        again = import_path(store, tmp_path / "rec")
        (hit,) = store.query(Query())
    assert (first.added, first.duplicates, len(first.skipped)) == (1, 0, 1)
    assert (again.added, again.duplicates) == (0, 1)
    assert hit.attempt.source == "# wrong\n" and hit.attempt.origin == "run"
    assert hit.attempt.tags == ("reduction", "softmax")


def test_import_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with ExperienceStore.open(tmp_path / "x.sqlite") as store:
        with pytest.raises(ExperienceError, match="neither a records folder"):
            import_path(store, tmp_path / "notes.txt")
        with pytest.raises(ExperienceError, match="no such file"):
            import_path(store, tmp_path / "missing")
        with pytest.raises(ExperienceError, match="not a records folder"):
            import_path(store, tmp_path)


def test_leaderboard_state_import_and_hook_store_the_same_attempt_once(tmp_path: Path) -> None:
    from grader.leaderboard.job import Job
    from grader.leaderboard.render import SHAPES_META, shape_meta
    from grader.leaderboard.seeds import Secret, task_payload
    from grader.leaderboard.state import EvalRow, State

    payload = task_payload(SOFTMAX, Secret(b"k" * 32, "test"))
    job = Job(submission="alice", task=payload, file_sha="f" * 64, round="main", source="# alice\n")
    row = EvalRow(submission="alice", task="softmax", file_sha="f" * 64, round="main", verdict="failed",
                  stage="correctness", code="output_untouched", message="left unwritten", speedup=None,
                  speedup_source=None, t_sub_ms=None, report_json=wrong_report().model_dump_json(),
                  wall_s=1.0, engine="local")
    ref = replace(row, submission="(reference)", round="reference")
    state_path = tmp_path / "lb.sqlite"
    with State.open(state_path) as state:
        state.set_meta(SHAPES_META, shape_meta([payload]))  # as the run keeps them
        state.record_evaluation(row)
        state.record_evaluation(ref)
    db = tmp_path / "x.sqlite"
    assert remember_leaderboard(job, row, local=True, path=db)
    assert not remember_leaderboard(replace(job, round="reference"), ref, local=True, path=db)
    with ExperienceStore.open(db) as store:
        summary = import_path(store, state_path)
        (hit,) = store.query(Query())
    assert (summary.added, summary.duplicates) == (0, 1)  # the hook got there first
    a = hit.attempt
    assert a.origin == "leaderboard" and a.source == "# alice\n" and a.accepted is None
    assert a.tags == ("reduction", "softmax") and "alice" in (a.origin_ref or "")


def test_leaderboard_attempt_slower_than_the_reference_still_passed() -> None:
    from grader.experience.extract import attempt_from_leaderboard
    from grader.experience.lessons import lesson
    from grader.leaderboard.state import EvalRow
    from grader.report.model import AcceptanceResult

    acc = AcceptanceResult(accepted=False, rule="seed", improvement_fraction=-1.0, pairs=3,
                           positive_fraction=0.0, reason="slower")
    report = good_report(2.0).model_copy(update={"ok": False, "stage": "accept", "acceptance": acc})
    row = EvalRow(submission="bob", task="softmax", file_sha="e" * 64, round="main", verdict="ok",
                  stage="accept", code=None, message="correct", speedup=0.5, speedup_source="pairs",
                  t_sub_ms=2.0, report_json=report.model_dump_json(), wall_s=1.0, engine="local")
    a = attempt_from_leaderboard(row, source=None, task=None)
    assert a.ok and a.accepted is None and a.speedup == 0.5
    assert lesson(a) == "passed: median 2 ms, 2 GB/s, 0.5x the reference"


def test_hook_never_raises_and_leaves_the_grade_alone(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"garbage" * 100)
    folder = tmp_path / "eval"
    folder.mkdir()
    assert remember_records_folder(folder, wrong_report(), None, path=bad) is False
    assert remember_records_folder(folder, wrong_report(), None, path=tmp_path / "ok.sqlite") is True


def test_a_finished_run_reaches_the_store_through_its_finisher(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``kgrader run --records`` feeds the store itself, after the folder's commit; the
    records folder alone never does (no hidden side effect of writing a report)."""
    from types import SimpleNamespace

    from grader.cli.app import _save

    db = tmp_path / "x.sqlite"
    monkeypatch.setenv("KGRADER_EXPERIENCE", str(db))
    rec = Records(tmp_path / "rec")
    rec.finish(rec.new_evaluation(SOFTMAX, "# silent\n", None), good_report(), None)
    assert not db.exists()
    req = SimpleNamespace(candidate=SimpleNamespace(text="# cand\n"), current=None)
    assert _save(good_report(), None, tmp_path / "rec", SOFTMAX, req) == []
    monkeypatch.setenv("KGRADER_EXPERIENCE", "off")
    assert _save(wrong_report(), None, tmp_path / "rec",
                 SOFTMAX, SimpleNamespace(candidate=SimpleNamespace(text="# other\n"), current=None)) == []
    with ExperienceStore.open(db, create=False) as store:
        (hit,) = store.query(Query())
    assert hit.attempt.source == "# cand\n" and hit.attempt.ok
    assert Path(hit.attempt.origin_ref or "").parent == tmp_path / "rec" / "evals"
