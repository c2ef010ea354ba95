"""The store's two databases behind one small interface: SQLite (a file; the default) and
PostgreSQL (a ``postgresql://`` URL, with the ``postgres`` extra: psycopg 3).

The store's SQL is written once, with ``?`` placeholders; what differs is said here:
the DDL's types, how a transaction serialises writers (SQLite: ``BEGIN IMMEDIATE`` takes
the one write lock; PostgreSQL: row locks, ``FOR UPDATE SKIP LOCKED`` when a worker
claims, and a per-token advisory lock around a quota check and its insert), and the
catalogue query. One connection per thread for both.
"""

from __future__ import annotations

import abc
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol, cast

from grader.db import transaction
from grader.errors import UsageError


class StoreError(UsageError):
    """The store cannot be opened or is not a kgrader service store of this version."""


class Cursor(Protocol):
    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Conn(Protocol):
    def execute(self, sql: str, args: Any = (), /) -> Cursor: ...


def is_url(target: str | Path) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


class Database(abc.ABC):
    """What :class:`grader.service.store.Store` needs from a database."""

    name = ""
    claim_suffix = ""  # appended to the claim's SELECT

    def __init__(self) -> None:
        self._local = threading.local()

    @abc.abstractmethod
    def conn(self) -> Conn:
        """This thread's connection."""

    @abc.abstractmethod
    def tx(self) -> AbstractContextManager[Conn]:
        """One transaction: committed on exit, rolled back on an exception."""

    @abc.abstractmethod
    def tables(self) -> set[str]:
        """The tables that exist."""

    def ddl(self, sqlite_ddl: str) -> list[str]:
        return [s for s in sqlite_ddl.split(";") if s.strip()]

    def lock_token(self, c: Conn, token_id: str) -> None:
        """Serialise a token's quota check with its insert (SQLite: the write lock does)."""
        self.lock_key(c, token_id)

    def lock_key(self, c: Conn, key: str) -> None:
        """Serialise the transactions that take ``key`` (SQLite: its one write lock does)."""
        return None


class SqliteDb(Database):
    name = "SQLite"

    def __init__(self, path: Path):
        super().__init__()
        self.path = path

    def conn(self) -> Conn:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=30.0)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
            except sqlite3.DatabaseError as e:
                raise StoreError(f"{self.path}: not a usable SQLite file ({e})") from None
            self._local.conn = conn
        return cast(Conn, conn)  # sqlite3's execute is the protocol's, positionally typed

    @contextmanager
    def tx(self) -> Iterator[Conn]:
        conn = self.conn()
        assert isinstance(conn, sqlite3.Connection)
        with transaction(conn):
            yield cast(Conn, conn)

    def tables(self) -> set[str]:
        rows = self.conn().execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        return {str(r[0]) for r in rows}


class _PgConn:
    """A psycopg connection that takes the store's ``?`` placeholders."""

    def __init__(self, conn: Any):
        self.raw = conn

    def execute(self, sql: str, args: Sequence[Any] = (), /) -> Cursor:
        cur: Cursor = self.raw.execute(sql.replace("?", "%s"), tuple(args))
        return cur


class PostgresDb(Database):
    name = "PostgreSQL"
    claim_suffix = " FOR UPDATE SKIP LOCKED"

    def __init__(self, url: str):
        super().__init__()
        try:
            import psycopg
        except ImportError:
            raise StoreError("a postgresql:// store needs psycopg 3: pip install -e "
                             "'.[postgres]'") from None
        self._psycopg = psycopg
        self.url = url

    def conn(self) -> Conn:
        conn: _PgConn | None = getattr(self._local, "conn", None)
        if conn is None or conn.raw.closed:
            try:
                conn = _PgConn(self._psycopg.connect(self.url, autocommit=True, connect_timeout=10))
            except self._psycopg.Error as e:
                raise StoreError(f"cannot connect to the PostgreSQL store: {e}") from None
            self._local.conn = conn
        return conn

    @contextmanager
    def tx(self) -> Iterator[Conn]:
        conn = self.conn()
        assert isinstance(conn, _PgConn)
        with conn.raw.transaction():
            yield conn

    def tables(self) -> set[str]:
        rows = self.conn().execute("SELECT table_name FROM information_schema.tables WHERE "
                                   "table_schema = current_schema()").fetchall()
        return {str(r[0]) for r in rows}

    def ddl(self, sqlite_ddl: str) -> list[str]:
        text = sqlite_ddl.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
        return [s.replace(" REAL", " DOUBLE PRECISION") for s in super().ddl(text)]

    def lock_key(self, c: Conn, key: str) -> None:
        c.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (key,))


def open_database(target: str | Path) -> Database:
    """SQLite for a path, PostgreSQL for a ``postgresql://`` URL."""
    return PostgresDb(str(target)) if is_url(target) else SqliteDb(Path(target))
