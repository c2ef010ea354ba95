"""The API's one error shape: HTTP status plus ``{"code", "message"}``.

Codes (the client and the docs read only these): ``bad_request`` (400: not JSON, a
field missing or of the wrong type), ``unauthenticated``/``bad_token`` (401),
``forbidden`` (403), ``not_found``/``unknown_task`` (404; a job of another token is
``not_found`` too, so its existence is not revealed), ``method_not_allowed`` (405),
``not_finished``/``already_finished`` (409), ``too_large`` (413), ``rate_limited``/``quota_exceeded`` (429,
with ``Retry-After`` where a wait helps), ``bad_candidate`` (422: the source fails the
checks every candidate must pass), ``internal`` (500, never a traceback).
"""

from __future__ import annotations


class ApiError(Exception):
    """A request refused with a status and a typed code."""

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after

    def body(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}
