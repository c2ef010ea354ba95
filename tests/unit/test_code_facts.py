"""Every fact about an error code is on its catalogue entry (sandbox/contract/codes.py), and
the sets its consumers used to keep by hand are derived from it, equal to what they were.
Each boundary (the CLI, the agent tools, the service's HTTP API, a leaderboard row) maps
every exception class to its output in one function; docs/architecture.md's "How to add a
check" names files that exist."""

from __future__ import annotations

import re
from pathlib import Path

from sandbox.contract import codes

ROOT = Path(__file__).resolve().parents[2]

# The hand-kept sets as they were (grader/grading/shared_device.py, leaderboard/integrity.py,
# and the leaderboard's and service's retry: every report error of origin infrastructure,
# every InfrastructureError) before the facts moved onto the entries.
OLD_TIMING = frozenset({"timeout", "compile_timeout", "gpu_busy_between_calls",
                        "work_escaped_timing", "work_deferred_to_copy", "timing_inconsistent",
                        "below_roofline_floor"})
OLD_VIOLATION = frozenset({
    "out_of_bounds_write", "out_of_bounds_access", "work_escaped_timing", "timing_inconsistent",
    "side_stream", "background_thread", "input_mutated", "precision_flags_changed",
    "torch_compute_in_launch", "op_audit_tampered", "out_tampered", "runner_spawned_process",
    "pids_limit", "disk_limit", "output_limit", "below_roofline_floor", "protocol_violation"})
OLD_RETRIED = frozenset({
    "bad_request", "calibration_failed", "device_out_of_memory", "disk_full",
    "foreign_gpu_process", "gate_failed", "harness_timeout", "image_build_failed",
    "image_missing", "infrastructure", "internal", "internal_error", "judge_error",
    "judge_killed", "judge_setup_failed", "missing_dependency", "needs_cuda", "needs_device",
    "not_finished", "ray_cluster_lost", "reference_failed", "result_malformed",
    "runner_isolation_unavailable", "runner_killed", "runner_setup_failed",
    "sandbox_unavailable", "service_unreachable", "timing_unreliable", "unsupported_dtype",
    "wire_mismatch",
    "interrupted",  # Stopped, an InfrastructureError: the leaderboard retries it next run
})
OLD_HTTP = {"unauthenticated": 401, "bad_token": 401, "forbidden": 403, "rate_limited": 429,
            "quota_exceeded": 429, "not_found": 404, "method_not_allowed": 405,
            "too_large": 413, "unknown_task": 404, "bad_candidate": 422, "already_finished": 409,
            "not_finished": 409, "internal": 500, "bad_request": 400}


def test_the_derived_sets_equal_the_hand_kept_ones() -> None:
    assert codes.TIMING_CODES == OLD_TIMING
    assert codes.VIOLATION_CODES == OLD_VIOLATION
    assert codes.RETRIED_CODES == OLD_RETRIED
    assert {c.name: c.http for c in codes.CATALOGUE if c.http is not None} == OLD_HTTP


def test_the_consumers_read_the_derived_sets() -> None:
    from grader.grading import shared_device
    from grader.leaderboard import integrity

    assert integrity.VIOLATION_CODES is codes.VIOLATION_CODES
    assert not hasattr(shared_device, "TIMING_CODES")  # no copy of its own
    for rel in ("grader/grading/shared_device.py", "grader/leaderboard/integrity.py",
                "grader/leaderboard/job.py", "grader/service/worker.py"):
        text = (ROOT / rel).read_text()
        assert "frozenset({" not in text.split("HONEST_SCAN_RULES")[-1], rel


def test_every_code_has_its_facts_set() -> None:
    for c in codes.CATALOGUE:
        for fact in ("timing", "disqualifying", "retried", "current", "runner"):
            assert isinstance(getattr(c, fact), bool), (c.name, fact)
        assert c.origins, c.name  # who is blamed: reused as the `blamed` fact
        assert set(c.origins) <= {"candidate", "infrastructure", "usage"}, c.name
        # A verdict against the candidate: timing and disqualifying only where blamed on it.
        if c.timing or c.disqualifying:
            assert "candidate" in c.origins and "report" in c.where, c.name
        # A re-run helps only what is not the candidate's verdict.
        if c.retried:
            assert c.origins != ("candidate",), c.name
        if "api" in c.where:
            assert c.http is not None and 400 <= c.http < 600, c.name
            said = re.search(r"HTTP (\d{3})", c.meaning)
            if said:  # the meaning's status, where it gives one, is the fact's
                assert int(said.group(1)) == c.http, c.name
        else:
            assert c.http is None, c.name
        if "host" in c.where:
            assert c.exit_code in (2, 75), c.name
        else:
            assert c.exit_code is None, c.name
    assert codes.BY_NAME["not_finished"].exit_code == 75


def test_retried_decides_by_origin_and_entry() -> None:
    assert codes.retried("timing_unreliable", "infrastructure")
    assert codes.retried("current_harness_timeout", "infrastructure")
    assert codes.retried("result_malformed", "infrastructure")
    assert not codes.retried("result_malformed", "candidate")
    assert not codes.retried("timeout", "candidate")
    assert codes.is_timing("current_timeout") and not codes.is_timing("wrong_values")


def test_the_page_shows_the_facts() -> None:
    page = codes.markdown()
    row = next(line for line in page.splitlines() if line.startswith("| `work_escaped_timing`"))
    assert "timing, disqualifying" in row
    row = next(line for line in page.splitlines() if line.startswith("| `judge_killed`"))
    assert "retried" in row
    row = next(line for line in page.splitlines() if line.startswith("| `bad_candidate`"))
    assert "HTTP 422" in row
    assert (ROOT / "docs/errors.md").read_text(encoding="utf-8") == page + "\n"


def test_the_service_refuses_a_source_with_the_shared_check_and_wording() -> None:
    import pytest

    from grader.errors import CandidateFileError
    from grader.scan import check_source
    from grader.service.errors import http_error

    cases = [("   \n", 422, "bad_candidate", "candidate is empty: s"),
             ("x = 1\0", 422, "bad_candidate", "candidate is binary (contains NUL bytes): s"),
             ("x = '\ud800'", 422, "bad_candidate", "candidate is not UTF-8 (a lone surrogate"),
             ("#" * 5000, 413, "too_large", "candidate is larger than 4096 bytes: s")]
    for text, status, code, said in cases:
        with pytest.raises(CandidateFileError) as e:
            check_source(text, "s", 4096)
        got_status, body, headers = http_error(e.value)
        assert (got_status, body["code"]) == (status, code)
        assert body["message"].startswith(said) and headers is None
    status, body, _ = http_error(RuntimeError("secret /path"))
    assert status == 500 and body == {"code": "internal",
                                      "message": "internal error (logged on the server)"}


def test_how_to_add_a_check_names_files_that_exist() -> None:
    doc = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    head = "### How to add a check (an error code)"
    assert head in doc and "## How to add a backend, a field format, a check" in doc
    section = doc.split(head, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    paths = set(re.findall(r"`((?:grader|sandbox|tests|scripts|docs)/[\w/.]+)", section))
    assert len(paths) >= 12, paths
    missing = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists())
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_boundary_maps_every_exception_class() -> None:
    import importlib
    import json
    import subprocess
    import sys

    from grader.agent.results import fault
    from grader.cli.common import error_document, exit_code_of
    from grader.errors import KgraderError
    from grader.service.errors import http_error

    for mod in ("grader.agent.schemas", "grader.agent.workspace", "grader.backends.stop",
                "grader.diagnostics.advice", "grader.experience.model",
                "grader.leaderboard.ray_cluster", "grader.leaderboard.state", "grader.outpaths",
                "grader.service.client", "grader.service.server", "grader.service.sql",
                "grader.tasks.checkrun", "grader.formats.common"):  # every class is defined
        importlib.import_module(mod)

    def walk(cls: type) -> list[type]:
        return [cls] + [s for c in cls.__subclasses__() for s in walk(c)]

    classes = walk(KgraderError)
    assert len(classes) >= 25
    for cls in classes:
        err = None
        for args in (("boom",), ("tool", "field", "boom"), ("boom", "why"), ("boom", 1, 2)):
            try:  # a class with its own constructor takes more
                err = cls(*args)
                break
            except TypeError:
                continue
        assert isinstance(err, KgraderError), f"cannot make a {cls.__name__} to map"
        assert err.code in codes.BY_NAME, cls
        doc = error_document(err)
        assert doc["error"]["code"] == err.code and doc["exit_code"] == exit_code_of(err)
        assert doc["exit_code"] in (2, 75)
        result = fault("compile_kernel", err)
        assert result["ok"] is False and result["errors"][0]["code"] == err.code
        status, body, _ = http_error(err)
        assert 400 <= status < 600 and set(body) == {"code", "message"}
        assert "Traceback" not in json.dumps([doc, result, body])
    bug = RuntimeError("secret")
    assert fault("t", bug)["errors"][0]["code"] == "internal_error"
    assert "secret" not in json.dumps(fault("t", bug)) + json.dumps(http_error(bug))
    # The CLI's exit code for not_finished is its entry's, through the one map.
    out = subprocess.run([sys.executable, "-c", "from grader.cli.common import fail\n"
                          "from grader.service.client import NotFinished\n"
                          "fail(NotFinished('not yet'))"], capture_output=True, text=True,
                         cwd=ROOT)
    assert out.returncode == 75 and out.stderr.startswith("infrastructure error: not yet")
