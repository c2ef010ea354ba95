"""Exit codes and infrastructure accounting derive from each error's origin alone."""

from __future__ import annotations

import pytest

from grader.cli.app import exit_code
from grader.report.model import Report, ReportError


def _report(*errors: tuple[str, str, str]) -> Report:
    return Report(ok=not errors, stage="benchmark",
                  errors=[ReportError(stage=s, code=c, origin=o, message="m")  # type: ignore[arg-type]
                          for s, c, o in errors])


@pytest.mark.parametrize(("errors", "want"), [
    ((), 0),
    ((("correctness", "wrong_values", "candidate"),), 1),
    ((("integrity", "judge_died", "candidate"),), 1),
    ((("integrity", "result_forged", "candidate"),), 1),
    ((("benchmark", "timeout", "candidate"),), 1),
    ((("sandbox", "missing_dependency", "infrastructure"),), 2),
    ((("sandbox", "wire_mismatch", "infrastructure"),), 2),
    ((("compile", "import", "candidate"), ("sandbox", "judge_error", "infrastructure")), 2),
])
def test_exit_code_follows_origin(errors: tuple[tuple[str, str, str], ...], want: int) -> None:
    r = _report(*errors)
    assert exit_code(r) == want
    assert r.infrastructure_failed() is (want == 2)
