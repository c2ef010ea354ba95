"""Secrets leave through no figure the judge writes: a candidate that passes correctness
honestly, notes the hidden shapes it was called on, then writes wrong values that encode
them in the benchmark stage, graded for real (bubblewrap, CPU, Triton interpreter).

The operator's report holds the encoded figures (the attack works: first bad element at
[0, 37], holding 1031.0, 999 elements wrong); the judge marked them as measured after a
hidden call; the candidate-facing copies (``redact``, the agent tools' ``bench_kernel``,
a published leaderboard page) hold none of them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grader.agent import tools
from grader.errors import SandboxUnavailableError
from grader.evaluate import EvalRequest, Source, evaluate
from grader.grading.redact import facts_for, redact
from grader.leaderboard.job import classify
from grader.leaderboard.render import SHAPES_META, render_site, shape_meta
from grader.leaderboard.seeds import Secret, task_payload
from grader.leaderboard.state import EvalRow, State
from grader.report.model import Report
from grader.task import load_task

pytestmark = pytest.mark.bwrap

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "examples" / "vector_add_small"  # hidden: 37x999, 1x1000, 67x1031
ATTACK = (REPO / "tests" / "attacks" / "runtime" / "numbers_channel_hidden_dims.py").read_text()
ELEMENTS = 64 * 1024  # the timed shape's


def _leaks(obj: Any) -> list[str]:
    """The encoded figures, wherever they sit in a JSON-like copy: the hidden values 999
    and 1031 (as numbers or text), the index [0, 37], an error maximum near 1031 (any
    number from 1000 to 1100 but the tune shape's 1024), the fraction 999 / 65536."""
    found: list[str] = []

    def walk(x: Any, path: str) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}")
        elif isinstance(x, list):
            if x == [0, 37]:
                found.append(f"{path}={x}")
            for i, v in enumerate(x):
                walk(v, f"{path}[{i}]")
        elif isinstance(x, bool):
            return
        elif isinstance(x, int | float):
            near = 1000 <= abs(x) <= 1100 and x != 1024  # 1024: the public tune N
            if x in (999, 1031) or near or abs(x * ELEMENTS - 999) < 1e-6:
                found.append(f"{path}={x}")
        elif isinstance(x, str):
            found.extend(f"{path}~{m.group()}"
                         for m in re.finditer(r"(?<![\w.])(999|1031)(?![\w])", x))

    walk(obj, "")
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The operator's report of one evaluation, and bench_kernel's result of another."""
    from grader.backends.bwrap import BwrapBackend

    try:
        BwrapBackend().check_available("cpu")
    except SandboxUnavailableError as e:
        if os.environ.get("CI"):
            pytest.fail(f"bwrap unavailable: {e}")
        pytest.skip(f"bwrap unavailable: {e}")
    root = tmp_path_factory.mktemp("numbers")
    saved = {k: os.environ.get(k) for k in ("KGRADER_EXPERIENCE", "KGRADER_HARDWARE")}
    os.environ["KGRADER_EXPERIENCE"] = str(root / "experience.sqlite")
    os.environ["KGRADER_HARDWARE"] = str(root / "hardware.json")
    try:
        spec, reference = load_task(TASK)
        full = evaluate(EvalRequest(task=spec, reference=reference,
                                    candidate=Source(name="candidate.py", text=ATTACK),
                                    backend="bwrap", device="cpu"))
        ws = tools.init_workspace(root / "ws", TASK, backend="bwrap", device="cpu")
        yield {"full": full, "spec": spec, "bench": tools.bench_kernel(ws, ATTACK), "ws": ws}
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_the_operator_report_holds_the_encoded_dims_and_the_judges_mark(graded: dict[str, Any]) -> None:
    full: Report = graded["full"]
    (err,) = full.errors
    assert (err.stage, err.code, err.origin) == ("benchmark", "wrong_values", "candidate")
    assert err.after_hidden is True  # stamped by the judge when it recorded the error
    c = full.correctness
    assert c is not None and c.first_bad is not None
    assert c.first_bad.index == [0, 37] and c.first_bad.actual == 1031.0  # M0 and N2
    assert c.first_bad.dims == {"M": 64, "N": 1024}  # a public shape: the old rule kept it all
    assert c.mismatch_fraction is not None and round(c.mismatch_fraction * ELEMENTS) == 999  # N0
    assert c.max_abs_error is not None and 1030 < c.max_abs_error < 1040
    assert full.taint is not None and full.taint.hidden_phase == "correctness"
    assert "correctness" in full.taint.sections
    assert _leaks(json.loads(full.model_dump_json()))  # the check below can see them


def test_the_redacted_copy_holds_none_of_the_encoded_figures(graded: dict[str, Any]) -> None:
    full: Report = graded["full"]
    public = redact(full, facts_for(graded["spec"], full))
    assert _leaks(json.loads(public.model_dump_json())) == []
    c = public.correctness
    assert c is not None and c.first_bad is not None
    assert (c.max_abs_error, c.max_rel_error, c.mismatch_fraction) == (None, None, None)
    assert (c.first_bad.index, c.first_bad.expected, c.first_bad.actual) == ([], None, None)
    assert "correctness.first_bad" in public.withheld and "measured after" in public.withheld[
        "correctness.max_abs_error"]
    (err,) = public.errors
    assert (err.stage, err.code) == ("benchmark", "wrong_values") and err.detail["withheld"] is True
    assert redact(public, facts_for(graded["spec"], public)) == public  # idempotent


def test_bench_kernel_returns_no_encoded_figure(graded: dict[str, Any]) -> None:
    res = graded["bench"]
    assert not res["ok"] and res["stage"] == "benchmark", res
    assert [e["code"] for e in res["errors"]] == ["wrong_values"]
    assert res["correctness"]["max_abs_error"] is None and res["correctness"]["first_bad"]["index"] == []
    assert _leaks(res) == []
    log = (graded["ws"].root / "records" / "tool-calls.jsonl").read_text()
    lines = [json.loads(line) for line in log.splitlines()]
    assert lines and all("args" in x for x in lines)
    # the args hold the agent's own source (whose docstring names the dims): the rest not
    assert [x for line in lines for x in _leaks({k: v for k, v in line.items() if k != "args"})] == []


def test_a_published_leaderboard_page_holds_no_encoded_figure(graded: dict[str, Any], tmp_path: Path) -> None:
    full: Report = graded["full"]
    verdict, stage, code, message, speedup, src = classify(full)
    row = EvalRow(submission="numbers-leaker", task="vector_add_small", file_sha="e" * 64,
                  round="main", verdict=verdict, stage=stage, code=code, message=message,
                  speedup=speedup, speedup_source=src, t_sub_ms=None,
                  report_json=full.model_dump_json(), wall_s=1.0, engine="local")
    state = tmp_path / "lb.sqlite"
    with State.open(state) as st:
        st.set_meta("tasks", ["vector_add_small"])
        st.set_meta(SHAPES_META, shape_meta([task_payload(TASK, Secret(b"k" * 32, "test"))]))
        st.record_evaluation(row)
    render_site(state, tmp_path / "site")
    pages = [p.read_text() for p in (tmp_path / "site").rglob("*.html")]
    assert len(pages) == 2
    for text in pages:
        assert not re.search(r"(?<![\w.])(999|1031)(?![\w])|\[0,\s*37\]|1031\.0|0\.01524", text), text[:400]
    render_site(state, tmp_path / "private", private=True)
    private = "".join(p.read_text() for p in (tmp_path / "private").rglob("*.html"))
    assert "1031.0" in private  # the operator's own page keeps the figures
