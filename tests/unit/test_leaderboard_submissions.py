"""Submission layout checks, secret seeds, redaction and classification (no sandbox)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.errors import UsageError
from grader.leaderboard.job import classify, redact_seeds
from grader.leaderboard.seeds import Secret, derive_seeds, load_secret, task_payload
from grader.leaderboard.submissions import discover
from grader.report.model import AcceptanceResult, CorrectnessResult, Report, ReportError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TASKS = ["add", "softmax"]


def make(root: Path, name: str, files: dict[str, str]) -> None:
    (root / name).mkdir(parents=True)
    for f, text in files.items():
        (root / name / f).write_text(text)


def test_each_layout_problem_gets_its_own_message_and_others_go_on(tmp_path: Path) -> None:
    make(tmp_path, "ok", {"add.py": "A", "softmax.py": "B"})
    make(tmp_path, "partial", {"add.py": "C"})
    make(tmp_path, "extra", {"add.py": "D", "notes.txt": "x"})
    make(tmp_path, "typo", {"sofmax.py": "E"})
    make(tmp_path, "empty", {})
    (tmp_path / "README").write_text("not a submission")
    subs, notes = discover(tmp_path, TASKS)
    by = {s.name: s for s in subs}
    assert by["ok"].status == "valid" and by["ok"].message == "ok"
    assert by["partial"].status == "valid" and by["partial"].missing == ["softmax"]
    assert "does not enter softmax" in by["partial"].message
    assert by["extra"].status == "invalid" and "'notes.txt'" in by["extra"].message
    assert by["typo"].status == "invalid" and "'sofmax.py'" in by["typo"].message
    assert by["empty"].status == "invalid" and "no task file" in by["empty"].message
    assert any("README" in n for n in notes)


def test_symlinks_are_never_followed(tmp_path: Path) -> None:
    make(tmp_path, "real", {"add.py": "A"})
    (tmp_path / "real" / "softmax.py").symlink_to("/etc/passwd")
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    by = {s.name: s for s in discover(tmp_path, TASKS)[0]}
    assert by["real"].status == "invalid" and "softmax.py" in by["real"].message
    assert by["linked"].status == "invalid" and "symlink" in by["linked"].message


def test_duplicate_content_is_evaluated_once_under_the_first_name(tmp_path: Path) -> None:
    make(tmp_path, "alice", {"add.py": "same"})
    make(tmp_path, "bob", {"add.py": "same"})
    make(tmp_path, "carol", {"add.py": "different"})
    by = {s.name: s for s in discover(tmp_path, TASKS)[0]}
    assert by["alice"].status == "valid"
    assert by["bob"].status == "duplicate" and by["bob"].duplicate_of == "alice"
    assert by["carol"].status == "valid"


def test_secret_seeds_replace_public_ones_deterministically(tmp_path: Path) -> None:
    sec = Secret(b"s" * 32, "test")
    p1 = task_payload(EXAMPLES / "vector_add_small", sec)
    p2 = task_payload(EXAMPLES / "vector_add_small", sec)
    other = task_payload(EXAMPLES / "vector_add_small", Secret(b"t" * 32, "test"))
    seeds = json.loads(p1.task_json)["correctness"]["seeds"]
    assert seeds == list(p1.seeds) == list(p2.seeds) and seeds != list(other.seeds)
    assert not set(seeds) & {17, 29}
    assert all(0 <= s < 2**31 for s in seeds)
    assert derive_seeds(sec, "a", 2) != derive_seeds(sec, "b", 2)
    assert "sss" not in repr(sec) and str(seeds[0]) not in repr(p1)


def test_secret_comes_from_file_then_environment(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "secret"
    f.write_text("x" * 20 + "\n")
    assert load_secret(f).key == b"x" * 20
    monkeypatch.setenv("KGRADER_LEADERBOARD_SECRET", "y" * 20)
    assert load_secret(None).key == b"y" * 20
    f.write_text("short")
    with pytest.raises(UsageError, match="shorter"):
        load_secret(f)


def test_redaction_removes_secret_seed_values_everywhere() -> None:
    tree = {"first_bad": {"seed": 123456789}, "msg": "seed 123456789 failed", "n": [5, 123456789]}
    out = redact_seeds(tree, (123456789,))
    assert "123456789" not in json.dumps(out)
    assert out["n"][0] == 5


def _report(**kw: object) -> Report:
    return Report(ok=False, stage="accept", **kw)  # type: ignore[arg-type]


def test_classification_of_reports() -> None:
    good = _report(correctness=CorrectnessResult(passed=True, checks=3), acceptance=AcceptanceResult(
        accepted=False, rule="seed", improvement_fraction=-1.0, pairs=5, positive_fraction=0.0,
        reason="slower"))
    verdict, *_, speedup, src = classify(good)
    assert (verdict, src) == ("ok", "pairs") and speedup == pytest.approx(0.5)
    rep = good.model_copy(deep=True)
    assert rep.acceptance is not None
    rep.acceptance.replicate_speedup = 1.7
    assert classify(rep)[4:] == (1.7, "replicate")
    anomaly = _report(errors=[ReportError(stage="benchmark", code="below_roofline_floor", origin="candidate", message="x")])
    assert classify(anomaly)[0] == "anomaly"
    wrong = _report(errors=[ReportError(stage="correctness", code="wrong_values", origin="candidate", message="bad")])
    assert classify(wrong)[:3] == ("failed", "correctness", "wrong_values")
