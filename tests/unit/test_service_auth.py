"""Service tokens (hashed, fail closed), roles and the rate limiter."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from grader.service.auth import Limits, RateLimiter, add_token, authenticate, hash_token, require
from grader.service.errors import ApiError
from grader.service.store import Store


def test_only_the_tokens_hash_is_stored_and_it_authenticates(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite")
    token, row = add_token(store, "alice", "submitter")
    assert token.startswith(f"kgt_{row.id}_") and row.sha256 == hash_token(token)
    raw = (tmp_path / "s.sqlite").read_bytes() + b"".join(
        p.read_bytes() for p in tmp_path.glob("s.sqlite-*"))
    assert token.encode() not in raw and token.split("_")[-1].encode() not in raw
    assert authenticate(store, f"Bearer {token}").name == "alice"
    assert authenticate(store, f"bearer  {token} ").name == "alice"


@pytest.mark.parametrize("header", [None, "", "Bearer", "Basic abc", "Bearer kgt_zz_x",
                                    "Bearer kgt_0123456789ab_" + "A" * 43])
def test_missing_malformed_or_unknown_tokens_are_401(tmp_path: Path, header: str | None) -> None:
    store = Store(tmp_path / "s.sqlite")
    add_token(store, "alice", "submitter")
    with pytest.raises(ApiError) as e:
        authenticate(store, header)
    assert e.value.status == 401 and e.value.code in ("unauthenticated", "bad_token")


def test_a_wrong_secret_for_a_known_id_and_a_revoked_token_are_401(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite")
    token, row = add_token(store, "alice", "submitter")
    forged = token[:-1] + ("A" if token[-1] != "A" else "B")
    with pytest.raises(ApiError, match="unknown, revoked"):
        authenticate(store, f"Bearer {forged}")
    assert store.revoke_token(row.id)
    with pytest.raises(ApiError) as e:
        authenticate(store, f"Bearer {token}")
    assert e.value.status == 401


def test_a_submitter_is_refused_operator_rights(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite")
    _, sub = add_token(store, "alice", "submitter")
    _, op = add_token(store, "root", "operator")
    with pytest.raises(ApiError) as e:
        require(sub, "operator")
    assert e.value.status == 403
    require(op, "operator")


@pytest.mark.parametrize(("name", "role", "limits"), [
    ("", "submitter", Limits()), ("a b", "submitter", Limits()),
    ("alice", "admin", Limits()), ("alice", "submitter", Limits(max_active=0))])
def test_bad_token_requests_are_refused(tmp_path: Path, name: str, role: str,
                                        limits: Limits) -> None:
    with pytest.raises(ValueError):
        add_token(Store(tmp_path / "s.sqlite"), name, role, limits)
    assert sqlite3.connect(tmp_path / "s.sqlite").execute(
        "SELECT COUNT(*) FROM tokens").fetchone() == (0,)


def test_the_rate_limiter_allows_a_burst_then_refills_at_the_rate() -> None:
    now = [0.0]
    lim = RateLimiter(clock=lambda: now[0])
    assert [lim.take("k", 3) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = lim.take("k", 3)
    assert wait == pytest.approx(20.0)  # 3 per minute: one every 20 s
    assert lim.take("other", 3) == 0.0  # keys are independent
    now[0] = 20.0
    assert lim.take("k", 3) == 0.0
    assert lim.take("k", 3) > 0.0
