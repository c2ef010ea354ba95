"""Reading the judge's result record: never trusting bytes from the sandbox.

The record is size-capped, opened without following links, authenticated with the
per-evaluation HMAC key, and parsed into strict models. Anything else is a ``sandbox``
error, never a crash and never a pass. Its text is the candidate's data: cleaned of what
pydantic or a terminal would refuse or obey, never a reason to refuse the record.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
from pathlib import Path

from grader.report.diagnostics_model import record_problem
from sandbox.contract import codes, text, wire

# The record's schema is the wire contract itself, parsed strictly by
# ``wire.record_from_json`` (unknown keys, missing keys, wrong types) after the MAC
# verifies. Caps on what a record may hold keep a buggy judge from flooding the report.
MAX_ERRORS = 100
MAX_WARNINGS = 100
MAX_MESSAGE = 8000
CODE = re.compile(r"^[a-z][a-z0-9_.\-]*$")


class ResultProblem(Exception):
    """The record is missing, oversized, forged or malformed. ``authentic`` says whether
    the judge wrote it (its MAC verified): only then can the fault be the harness's."""

    def __init__(self, code: str, message: str, *, authentic: bool = False):
        super().__init__(message)
        self.code = code
        self.message = message
        self.authentic = authentic


def _caps(rec: wire.Record) -> str | None:
    if len(rec.errors) > MAX_ERRORS or len(rec.warnings) > MAX_WARNINGS:
        return f"{len(rec.errors)} errors / {len(rec.warnings)} warnings (caps {MAX_ERRORS})"
    for e in rec.errors:
        if not CODE.match(e.code) or len(e.code) > 64 or len(e.message) > MAX_MESSAGE:
            return f"error code {e.code[:70]!r} or its message breaks the contract"
        if not codes.is_report_code(e.code) or e.origin not in codes.lookup(e.code).origins:
            return f"error code {e.code!r} ({e.origin}) is not in the catalogue (docs/errors.md)"
    if rec.stage == "integrity" or any(e.stage == "integrity" and e.code != "out_tampered"
                                       for e in rec.errors):
        return "only the host may judge integrity, apart from out_tampered"
    if rec.diagnostics is not None:  # counters and sanitizer findings (grader/diagnostics)
        return record_problem(rec.diagnostics)
    return None


def _clean_text(body: str) -> str:
    """The record with every string made safe (``sandbox.contract.text.clean_strings``): the judge
    cleans what a runner said where it enters the record, and this is the host's own pass,
    for what the judge missed (a tool's output, a name). A lone surrogate or an escape
    sequence in a candidate's text must not make pydantic refuse, or a terminal obey, the
    record: a refusal would turn the candidate's text into an infrastructure error."""
    try:
        raw = json.loads(body)
    except (ValueError, RecursionError):
        return body  # the strict parse says why
    cleaned = text.clean_strings(raw)
    return body if cleaned == raw else json.dumps(cleaned, sort_keys=True, separators=(",", ":"))


def read_result(path: Path, key: bytes, max_bytes: int) -> wire.Record:
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
        rec = wire.record_from_json(_clean_text(body))
    except wire.WireFormatError as e:
        code = "wire_mismatch" if "wire version" in str(e) else "result_malformed"
        raise ResultProblem(code, f"authenticated record does not match the contract: {e}",
                            authentic=True) from None
    problem = _caps(rec)
    if problem is not None:
        raise ResultProblem("result_malformed", f"authenticated record rejected: {problem}",
                            authentic=True)
    return rec
