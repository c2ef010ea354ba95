"""Reading the judge's result record: never trusting bytes from the sandbox.

The record is size-capped, opened without following links, authenticated with the
per-evaluation HMAC key, and parsed into strict models. Anything else is a ``sandbox``
error, never a crash and never a pass.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grader.diagnostics.models import RawDiagnostics
from grader.report.model import StageError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JudgeError(_Strict):
    stage: Literal["sandbox", "compile", "correctness", "benchmark", "accept"]
    code: str = Field(pattern=r"^[a-z][a-z0-9_.\-]*$", max_length=64)
    message: str = Field(max_length=8000)
    line: int | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class JudgeTiming(_Strict):
    mean: float
    median: float
    p95: float
    std: float
    min: float
    cv: float
    n: int
    samples_ms: list[float]
    judge_ms: list[float]
    flagged_samples: int
    overhead_budget_ms: float
    checked_calls: int
    check_policy: str
    cache: Literal["cold", "hot"]
    flush_bytes: int
    dims: dict[str, int]
    clock: Literal["cuda_event", "perf_counter"]
    max: float | None = None
    device_state: list[dict[str, Any]] = Field(default_factory=list, max_length=10000)
    device_state_unmeasured: str | None = None


class JudgeAcceptance(_Strict):
    t_cur: list[float]
    t_cand: list[float]
    replicate: dict[str, Any] | None = None


class JudgeCorrectness(_Strict):
    passed: bool = False
    checks: int = 0
    shapes_checked: list[dict[str, int]] = Field(default_factory=list)
    seeds: int = 0
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch_fraction: float | None = None
    first_bad: dict[str, Any] | None = None


class JudgePayload(_Strict):
    stage: Literal["sandbox", "compile", "correctness", "benchmark", "accept"] | None
    errors: list[JudgeError] = Field(max_length=100)
    warnings: list[str] = Field(default_factory=list, max_length=100)
    device: str
    environment: dict[str, Any]
    compile: dict[str, float] | None = None
    correctness: JudgeCorrectness | None = None
    timing: JudgeTiming | None = None
    acceptance: JudgeAcceptance | None = None
    peaks: dict[str, Any] | None = None
    calibration: dict[str, Any] | None = None
    diagnostics: RawDiagnostics | None = None  # counters (profile mode) / sanitizer results


class ResultProblem(Exception):
    """The record is missing, oversized, forged or malformed."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.error = StageError(stage="sandbox", code=code, message=message)


def read_result(path: Path, key: bytes, max_bytes: int) -> JudgePayload:
    """Open without following links, cap the size, verify the MAC, validate strictly."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ResultProblem("result_missing", "the judge wrote no result record") from None
    except OSError as e:
        raise ResultProblem("result_unreadable", f"result record not a plain file: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ResultProblem("result_unreadable", "result record is not a regular file")
        if st.st_size > max_bytes:
            raise ResultProblem("result_too_large",
                                f"result record is {st.st_size} bytes (cap {max_bytes}); rejected")
        data = os.read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ResultProblem("result_too_large", f"result record exceeds {max_bytes} bytes; rejected")
    try:
        outer = json.loads(data)
        body, mac = outer["payload"], outer["mac"]
        if not isinstance(body, str) or not isinstance(mac, str):
            raise TypeError("payload and mac must be strings")
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise ResultProblem("result_malformed", f"result record is not valid: {e}") from None
    want = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, mac):
        raise ResultProblem("result_forged",
                            "result record failed authentication: it was not written by the judge")
    try:
        return JudgePayload.model_validate_json(body)
    except ValidationError as e:
        raise ResultProblem("result_malformed", f"authenticated record does not match the schema: "
                            f"{e.error_count()} problem(s), first: {e.errors()[0]['msg']}") from None
