"""A candidate cannot make its runner's death read as an outside kill.

A runner dead of SIGKILL the judge did not send is ``runner_killed``, the infrastructure's
(retried, never counted against the candidate): so a kernel that fails a hidden shape would
gain a retry, again and again, if it could SIGKILL its own runner. Each file
``tests/attacks/runtime/self_sigkill_*.py`` tries one family of routes on its first hidden
shape. With the scan off (tests/e2e/test_runtime_attacks.py, the runtime-only policy) the
runner's seccomp filter refuses each, and the verdict is the candidate's
``output_untouched``; here, with the scan on (the permissive ``default`` policy), the scan
denies each first. Either way: a candidate verdict, never ``runner_killed``, never a pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.evaluate import EvalRequest, evaluate

from ._backends import backend_or_skip
from .test_runtime_attacks import ATTACKS, CASES, LIMITS, TASK

pytestmark = pytest.mark.bwrap
SELF_SIGKILL = sorted(p.name for p in ATTACKS.glob("self_sigkill_*.py"))


def test_every_self_sigkill_attack_is_graded_with_the_scan_off_too() -> None:
    assert len(SELF_SIGKILL) >= 9
    assert all(CASES[name] == ({"correctness"}, {"output_untouched"}) for name in SELF_SIGKILL)


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
@pytest.mark.parametrize("name", SELF_SIGKILL)
def test_self_sigkill_attack_with_the_scan_on_is_the_candidates(name: str, backend: str) -> None:
    report = evaluate(EvalRequest.from_paths(task_dir=TASK, candidate=Path(ATTACKS / name),
                                             backend=backend_or_skip(backend), device="cpu",
                                             policy="default", limits=dict(LIMITS)))
    assert not report.ok, report.model_dump_json(indent=1)
    assert report.errors and all(e.origin == "candidate" for e in report.errors), report.errors
    assert not any(e.code.endswith("runner_killed") for e in report.errors)
    assert report.errors[0].stage == "scan", report.errors[0]
