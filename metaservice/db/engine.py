"""Engine creation for the two supported backends.

SQLite (embedded default): WAL journal, foreign keys on, ``synchronous=FULL`` so an
acknowledged write survives a power loss, a busy timeout, and transactions begun by us:
write transactions use ``BEGIN IMMEDIATE`` so two writers queue on the database lock instead of
failing when one upgrades a read lock. PostgreSQL: psycopg 3, READ COMMITTED, row locks where a
rule needs them.

A pooled PostgreSQL connection is checked (``SELECT 1``) before use only when it has sat idle in
the pool for :data:`PING_AFTER_IDLE_SECONDS` or more, not on every checkout as SQLAlchemy's
``pool_pre_ping`` does: a ping is a round trip and, measured, most of a millisecond of the
server's CPU per transaction, and a connection in steady use has just shown it works. A
connection found dead is replaced before the request uses it. One that dies between two close
uses (the database restarted within the second) fails its statement as a disconnect, as any
statement does while the database is away: the request is answered 503
``database_unavailable`` (``Retry-After``) and SQLAlchemy replaces every connection of the pool
opened before.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError
from sqlalchemy.orm import Session

from metaservice.errors import InvalidRequestError

WRITE = {"metaservice_write": True}

# A pooled PostgreSQL connection idle at least this long is pinged before use (module docstring).
PING_AFTER_IDLE_SECONDS = 1.0


class DatabaseURLError(ValueError):
    """The configured database URL cannot be used."""


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def on_postgres(session: Session) -> bool:
    """Whether the session's database is PostgreSQL (for statements written per dialect)."""
    return session.get_bind().dialect.name == "postgresql"


def build_engine(url: str, *, sqlite_busy_timeout_ms: int = 30_000, **kwargs: Any) -> Engine:
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise DatabaseURLError(f"cannot parse database URL {url!r}") from exc
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url, sqlite_busy_timeout_ms, **kwargs)
    if parsed.get_backend_name() == "postgresql":
        kwargs.setdefault("pool_size", 10)
        kwargs.setdefault("max_overflow", 20)
        ping_after_idle_s = kwargs.pop("ping_after_idle_s", PING_AFTER_IDLE_SECONDS)
        engine = create_engine(url, **kwargs)
        if not kwargs.get("pool_pre_ping"):
            _ping_when_idle(engine, ping_after_idle_s)
        return engine
    raise DatabaseURLError(f"unsupported database backend {parsed.get_backend_name()!r}")


def _ping_when_idle(engine: Engine, after_idle_s: float) -> None:
    """Ping a pooled connection at checkout when it has been idle ``after_idle_s`` or more; a
    dead one is replaced (the pool retries the checkout on ``DisconnectionError``)."""
    dialect = engine.dialect

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        # ``record.info`` belongs to the DBAPI connection: a replaced one starts empty
        record.info["checked_in_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        checked_in_at = record.info.get("checked_in_at")
        if checked_in_at is None or time.monotonic() - checked_in_at < after_idle_s:
            return  # just opened, or in steady use
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as exc:
            raise DisconnectionError(f"a pooled connection idle for "
                                     f"{time.monotonic() - checked_in_at:.1f} s is dead") from exc


def _sqlite_engine(url: str, busy_timeout_ms: int, **kwargs: Any) -> Engine:
    engine = create_engine(
        url,
        connect_args={"timeout": busy_timeout_ms / 1000, "check_same_thread": False},
        **kwargs,
    )

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event below emit BEGIN, not the sqlite3 module.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        write = connection.get_execution_options().get("metaservice_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


__all__ = ["WRITE", "DatabaseURLError", "build_engine", "is_sqlite", "InvalidRequestError"]
