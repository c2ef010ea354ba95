"""Candidate text is data, end to end: `kgrader run` (human output, real bubblewrap, torch and
Triton on the CPU) and a leaderboard batch grade a candidate whose failure message is
hostile text as the candidate's own failure (exit 1, committed), and print it literally.

Once, a lone surrogate made pydantic refuse the record (exit 2, no report; on a leaderboard
an infrastructure error, never graded), an unbalanced rich tag crashed the report, and a
balanced one drew a green PASS line under the real FAIL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import kgrader
from .test_leaderboard_run import kgrader as leaderboard
from .test_leaderboard_run import submissions, tiny_task, verdicts

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "examples" / "vector_add_small"
RUNTIME = ROOT / "tests" / "attacks" / "runtime"
RUNTIME_ONLY = ROOT / "tests" / "policies" / "runtime-only.toml"

pytestmark = pytest.mark.bwrap

# attack -> (code, text its rendered message must show literally)
CASES = {
    "surrogate_message.py": ("exception", "lone surrogates \ufffd and \ufffd, then the rest"),
    "rich_markup_message.py": ("exception", "[bold green]PASS[/]  task=vector_add_small"),
    "control_chars_message.py": ("exception", "\\x1b[1A\\x1b[2K\\x0d\\x1b[1;32mPASS\\x1b[0m"),
    "forged_runner_reply.py": ("protocol_violation", "threads is not an integer"),
}


@pytest.mark.parametrize("attack", sorted(CASES))
def test_hostile_text_is_the_candidates_failure_and_is_printed_literally(attack: str,
                                                                        tmp_path: Path) -> None:
    code, literal = CASES[attack]
    p = kgrader("run", SMALL, RUNTIME / attack, "--backend", "bwrap", "--device", "cpu",
                "--policy", RUNTIME_ONLY, "--out", tmp_path / "o")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    err = report["errors"][0]
    assert (err["stage"], err["code"], err["origin"]) == ("compile", code, "candidate"), err
    assert report["ok"] is False
    out = p.stdout
    # Nothing the candidate wrote reaches the terminal as control: no escape, no CR, no NUL
    # (captured output has no colour, so rich itself writes no escape either).
    assert not any(c in out for c in "\x1b\r\x00\x08\u202e"), repr(out)
    flat = " ".join(ln.strip() for ln in out.splitlines())  # rich wraps at 80 columns
    assert literal in flat, out
    # One verdict line, at the margin; every other line, the message's included, is indented.
    at_margin = [ln for ln in out.splitlines() if ln and not ln[0].isspace()]
    assert len(at_margin) == 1 and at_margin[0].startswith("FAIL  task=vector_add_small"), out


def test_leaderboard_grades_hostile_text_as_the_submissions_failure(tmp_path: Path) -> None:
    """Committed as the submission's verdict (not an infrastructure error, retried forever),
    under the task's own policy (triton-only), which lets both files through its scan."""
    task = tiny_task(tmp_path / "tasks")
    subs = submissions(tmp_path / "subs", "tiny_add",
                       {"surrogate": RUNTIME / "surrogate_message.py",
                        "controls": RUNTIME / "control_chars_message.py"})
    state = tmp_path / "state.sqlite"
    p = leaderboard("run", "--tasks", str(task), "--submissions", str(subs), "--state", str(state),
                    "--workers", "1", "--device", "cpu", "--backend", "bwrap", "--top-k", "0")
    assert "infrastructure" not in p.stderr.lower(), p.stderr[-3000:]
    v = verdicts(state)
    assert v[("surrogate", "tiny_add", "main")] == ("failed", "compile", "exception"), v
    assert v[("controls", "tiny_add", "main")] == ("failed", "compile", "exception"), v
