"""The API's one error shape: HTTP status plus ``{"code", "message"}``.

Codes (the client and the docs read only these): ``bad_request`` (400: not JSON, a
field missing or of the wrong type), ``unauthenticated``/``bad_token`` (401),
``forbidden`` (403), ``not_found``/``unknown_task`` (404; a job of another token is
``not_found`` too, so its existence is not revealed), ``method_not_allowed`` (405),
``not_finished``/``already_finished`` (409), ``too_large`` (413), ``rate_limited``/``quota_exceeded`` (429,
with ``Retry-After`` where a wait helps), ``bad_candidate`` (422: the source fails the
checks every candidate must pass), ``internal`` (500, never a traceback).

A code's status is a fact of its catalogue entry (``http``, :mod:`sandbox.contract.codes`),
never a call site's; :func:`http_error` is the one map from any exception to the answer.
"""

from __future__ import annotations

from typing import Any

from grader.errors import CandidateFileError, CandidateTooLargeError
from sandbox.contract.codes import lookup

INTERNAL_MESSAGE = "internal error (logged on the server)"


class ApiError(Exception):
    """A request refused with a typed code (its status: the code's catalogue entry;
    ``status`` only for a status the web framework chose itself)."""

    def __init__(self, code: str, message: str, retry_after: float | None = None, *,
                 status: int | None = None):
        super().__init__(message)
        http = lookup(code).http if status is None else status
        if http is None:
            raise ValueError(f"{code} is no code of the API (sandbox/contract/codes.py)")
        self.status = http
        self.code = code
        self.message = message
        self.retry_after = retry_after

    def body(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def api_error(exc: BaseException) -> ApiError:
    """What the API answers for ``exc``: a refusal as it is; a candidate's text that fails
    the checks every candidate must pass (:func:`grader.scan.check_source`, the CLI's and the
    agent tools' own) ``too_large`` or ``bad_candidate`` with that check's message; anything
    else ``internal`` (its text stays in the server's log)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, CandidateTooLargeError):
        return ApiError("too_large", exc.message)
    if isinstance(exc, CandidateFileError):
        return ApiError("bad_candidate", exc.message)
    return ApiError("internal", INTERNAL_MESSAGE)


def http_error(exc: BaseException) -> tuple[int, dict[str, str], dict[str, Any] | None]:
    """``(status, body, headers)`` of the API's answer to ``exc`` (the service's one map)."""
    e = api_error(exc)
    headers = {"Retry-After": str(max(1, round(e.retry_after)))} if e.retry_after else None
    return e.status, e.body(), headers
