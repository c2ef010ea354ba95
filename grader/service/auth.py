"""API tokens, roles and rate limits.

A token is ``kgt_<id>_<secret>``: ``id`` (12 hex) names its row, ``secret`` is 32 random
bytes (urlsafe base64). The store keeps only ``sha256(token)``; a presented token is
hashed and compared with :func:`hmac.compare_digest` against the row its id names, so the
comparison takes the same time whatever the secret's first differing byte. The token
itself is printed once, by ``kgrader serve token add``, and never stored.

Roles: ``submitter`` submits and reads its own jobs; ``operator`` also reads every job
and every full report. Anything else fails closed (a revoked, unknown or malformed token
is a 401; a role without the right is a 403).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from grader.service.errors import ApiError
from grader.service.store import Store, TokenRow

ROLES = ("submitter", "operator")
_TOKEN = re.compile(r"kgt_([0-9a-f]{12})_[A-Za-z0-9_-]{43}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("ascii", "replace")).hexdigest()


@dataclass(frozen=True)
class Limits:
    """A token's quota: submissions per minute (a token bucket of that size), jobs queued
    or running at once, submissions per rolling 24 h."""

    submit_per_min: float = 30.0
    max_active: int = 20
    max_per_day: int = 2000


def add_token(store: Store, name: str, role: str, limits: Limits = Limits()) -> tuple[str, TokenRow]:
    """A new token: returns the token (shown once) and the row stored (its hash only)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if not _NAME.fullmatch(name):
        raise ValueError("a token name is 1-64 letters, digits, '_', '.', '-' "
                         f"(starting with a letter or digit), got {name!r}")
    if limits.submit_per_min <= 0 or limits.max_active < 1 or limits.max_per_day < 1:
        raise ValueError("quotas must be positive")
    token_id = secrets.token_hex(6)
    token = f"kgt_{token_id}_{secrets.token_urlsafe(32)}"
    row = TokenRow(id=token_id, name=name, role=role, sha256=hash_token(token),
                   submit_per_min=limits.submit_per_min, max_active=limits.max_active,
                   max_per_day=limits.max_per_day, created_at=time.time(), revoked=False)
    store.add_token(row)
    return token, row


def authenticate(store: Store, header: str | None) -> TokenRow:
    """The token row behind an ``Authorization: Bearer`` header, or a 401."""
    if not header:
        raise ApiError("unauthenticated", "an API token is required "
                       "(Authorization: Bearer kgt_...)")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    m = _TOKEN.fullmatch(token) if scheme.lower() == "bearer" else None
    row = store.token(m.group(1)) if m else None
    # Compare even when the id is unknown, so timing does not tell ids apart either.
    expected = row.sha256 if row is not None else "0" * 64
    if not hmac.compare_digest(hash_token(token), expected) or row is None or row.revoked:
        raise ApiError("bad_token", "the API token is unknown, revoked or malformed")
    return row


def require(row: TokenRow, role: str) -> None:
    if role == "operator" and row.role != "operator":
        raise ApiError("forbidden", "this needs an operator token")


class RateLimiter:
    """Token buckets per key, in memory: ``rate`` per minute, a burst of ``rate``. A
    restart refills them (the daily quota, which is durable, bounds what that gains)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str, per_min: float) -> float:
        """Take one; 0.0 when allowed, else the seconds until one is available."""
        now = self._clock()
        cap = max(per_min, 1.0)
        with self._lock:
            level, at = self._buckets.get(key, (cap, now))
            level = min(cap, level + (now - at) * per_min / 60.0)
            if level >= 1.0:
                self._buckets[key] = (level - 1.0, now)
                return 0.0
            self._buckets[key] = (level, now)
            return float((1.0 - level) * 60.0 / per_min)
