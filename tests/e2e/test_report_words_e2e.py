"""The human report and the agent tools' errors in words, end to end: real bubblewrap
sandbox, CPU device, Triton interpreter, examples/vector_add_small.

* a wrong kernel: the report names no Python literal, lists its steps in the order they
  ran, says where correctness stopped (not "0 checked calls over 0 shapes"), and the
  kernel-only hint is one short clause;
* a ``launch`` with the wrong signature: the error names the call the task makes, in the
  report (``kgrader run --json``) and in the agent tool's result.

(The acceptance headline's golden strings are in tests/unit/test_report_words.py, read
from real ``kgrader run --current`` reports under tests/data/reports: an acceptance run
takes ~2 minutes on the CPU.)
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.agent import tools
from grader.errors import SandboxUnavailableError

from .conftest import kgrader, kgrader_json

pytestmark = pytest.mark.bwrap

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "examples" / "vector_add_small"
GOOD = (TASK / "candidates" / "good.py").read_text()
# The task calls launch(x, y, out); this launcher takes two tensors.
TWO_ARGS = GOOD.replace("def launch(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:",
                        "def launch(x: torch.Tensor, out: torch.Tensor) -> None:\n    y = x", 1)
EXPECTED = ("the task calls launch(x, y, out): the inputs, then the preallocated outputs (out), "
            "written in place")


@pytest.fixture(scope="module", autouse=True)
def _bwrap() -> Iterator[None]:
    from grader.backends.bwrap import BwrapBackend

    try:
        BwrapBackend().check_available("cpu")
    except SandboxUnavailableError as e:
        if os.environ.get("CI"):
            pytest.fail(f"bwrap unavailable: {e}")
        pytest.skip(f"bwrap unavailable: {e}")
    yield


def test_a_wrong_kernels_report_reads_as_words() -> None:
    p = kgrader("run", TASK, TASK / "candidates" / "wrong.py", no_traceback=True)
    assert p.returncode == 1, p.stderr
    out = p.stdout
    assert not re.search(r"\bNone\b", out), out
    assert out.startswith("FAIL  task=vector_add_small  stage=correctness  device=cpu")
    assert "correctness: failed: stopped at the first wrong output ('out' on a tune shape" in out
    assert "0 checked calls" not in out
    assert out.count("decoy") == 1 and ("kernel-only task: write outputs from Triton kernels "
                                        "(host code sees decoys)") in " ".join(out.split())
    steps = " ".join(next(line for line in out.splitlines() if "steps:" in line).split())
    names = [part.split()[0] for part in steps.split("steps: ")[1].split(", ")]
    order = ["scan", "sandbox_setup", "judge_ready", "compile", "compile_inputs",
             "compile_first_call", "correctness", "benchmark", "teardown", "total"]
    assert names == [n for n in order if n in names] and "judge_ready" in names, names


def test_a_wrong_launch_signature_names_the_call_the_task_makes(tmp_path: Path) -> None:
    cand = tmp_path / "two_args.py"
    cand.write_text(TWO_ARGS, encoding="utf-8")
    code, report, _ = kgrader_json("run", TASK, cand)
    assert code == 1
    (err,) = report["errors"]
    assert (err["stage"], err["code"], err["origin"]) == ("compile", "exception", "candidate")
    assert err["message"] == ("TypeError: launch() takes 2 positional arguments but 3 were "
                              f"given; {EXPECTED}")
    assert err["detail"]["expected_call"] == EXPECTED.removeprefix("the task calls ")

    ws = tools.init_workspace(tmp_path / "ws", TASK, backend="bwrap", device="cpu",
                              quick_calibration=True)
    res = tools.compile_kernel(ws, TWO_ARGS)
    assert res["ok"] is False and [e["code"] for e in res["errors"]] == ["exception"], res
    assert res["errors"][0]["message"].endswith(EXPECTED)


def test_accept_candidate_says_its_verdict_in_the_reports_words(tmp_path: Path) -> None:
    """best.py = good.py, then good.py again: a real paired run, whatever the host's noise
    makes of it, said as a ratio against best.py (never a percentage), consistent with
    ``accepted`` and with ``improvementFraction``."""
    ws = tools.init_workspace(tmp_path / "ws", TASK, backend="bwrap", device="cpu",
                              quick_calibration=True)
    first = tools.accept_candidate(ws, GOOD)
    assert first["accepted"] and first["verdict"] is None, first  # no best to pair with
    res = tools.accept_candidate(ws, GOOD)
    if res["errors"]:  # a loaded host's timing fault: nothing to say in words
        assert all(e["origin"] == "infrastructure" for e in res["errors"]), res["errors"]
        return
    verdict = res["verdict"]
    assert isinstance(verdict, str) and "best.py" in verdict and "%" not in verdict, verdict
    assert verdict.endswith(", rejected") != res["accepted"], (verdict, res["accepted"])
    r = res["improvementFraction"]
    # Where the figures are withheld the words are improvementFraction said as a ratio: the
    # same side of 1, always. Otherwise they are the median of the pairs' log ratios, which
    # can differ from the fraction's median only through an even count's middle two.
    head = verdict.split(" (")[0]
    margin = 0.0 if "interval withheld" in verdict else 0.02
    if isinstance(r, float) and abs(r) > margin and "x faster" in head:
        assert r > 0, (verdict, r)
    if isinstance(r, float) and abs(r) > margin and "x slower" in head:
        assert r < 0, (verdict, r)
