"""Every side sees only its own source, and no runner sees the judge's request.

A real acceptance run (bwrap and docker, the CPU, the static scan off): the candidate is
tests/attacks/runtime/read_other_side_source.py, the current best a correct kernel whose
first line is a secret marker. The attack tries every route to the current's source and to
the judge's request, in its first runner and again in its acceptance runner while the
current best is loaded beside it, and raises with everything it read. Neither the marker
nor the request's HMAC key may appear anywhere in the report.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

import grader.evaluate as ge

from ._backends import backend_or_skip

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "vector_add_small"
ATTACK = ROOT / "tests" / "attacks" / "runtime" / "read_other_side_source.py"
CURRENT = Path(__file__).parent / "isolation_candidates" / "current_with_marker.py"
MARKER = "KGRADER-CURRENT-SECRET-5d41402abc4b2a76"
RUNTIME_ONLY = str(ROOT / "tests" / "policies" / "runtime-only.toml")
LIMITS: dict[str, float | int | None] = {"compile_s": 90, "run_s": 90, "memory_mib": 2048}

pytestmark = [pytest.mark.bwrap,
              pytest.mark.skipif(os.geteuid() != 0, reason="sources are staged for the judge's uid "
                                 "by a root host")]


def test_the_current_best_loaded_beside_the_attack_is_correct_and_carries_the_marker() -> None:
    assert MARKER in CURRENT.read_text().splitlines()[0]
    assert MARKER not in ATTACK.read_text()  # the attack must find it, not know it


@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_candidate_reads_neither_the_current_best_nor_the_judge_request(
        backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    keys: list[bytes] = []
    real = secrets.token_bytes

    def recorded(n: int | None = None) -> bytes:
        keys.append(real(n))
        return keys[-1]

    monkeypatch.setattr(ge.secrets, "token_bytes", recorded)
    report = ge.evaluate(ge.EvalRequest.from_paths(
        TASK, ATTACK, CURRENT, backend=backend_or_skip(backend), device="cpu",
        policy=RUNTIME_ONLY, limits=dict(LIMITS), stages=("compile", "correctness")))
    text = report.model_dump_json()
    assert MARKER not in text, text
    assert keys and all(k.hex() not in text for k in keys)
    assert not report.ok and report.errors, text
    first = report.errors[0]
    # The current best loaded and ran (the /tmp plant did not reach it); then the attack's
    # acceptance runner raised with its whole account.
    assert (first.stage, first.code) == ("accept", "exception"), text
    assert first.origin == "candidate" and first.message.startswith("RuntimeError: PROBE "), text
    account = first.message
    assert "LEAK" not in account and "HIJACKED" not in account, account
    assert "own from_file=READ:" in account, account  # the route works on a readable file
    for refused in ("open /kg/in/current.py=EACCES", "list /kg/in=EACCES",
                    "open /proc/self/root/kg/in/current.py=EACCES", "list /kg/out=EACCES",
                    "open /kg/out/.judge-secret.json=EACCES"):
        assert refused in account, (refused, account)
    assert "from_file /kg/in/current.py=READ" not in account, account
