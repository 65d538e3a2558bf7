"""Engine creation for the two supported backends.

SQLite (embedded default): WAL journal, foreign keys on, ``synchronous=FULL`` so an
acknowledged write survives a power loss, a busy timeout, and transactions begun by us:
write transactions use ``BEGIN IMMEDIATE`` so two writers queue on the database lock instead of
failing when one upgrades a read lock. PostgreSQL: psycopg 3, READ COMMITTED, row locks where a
rule needs them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session

from metaservice.errors import InvalidRequestError

WRITE = {"metaservice_write": True}


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
        kwargs.setdefault("pool_pre_ping", True)
        return create_engine(url, **kwargs)
    raise DatabaseURLError(f"unsupported database backend {parsed.get_backend_name()!r}")


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
