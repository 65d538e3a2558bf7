"""Engine creation for the two supported backends.

SQLite (embedded default): WAL journal, foreign keys on, ``synchronous=FULL`` so an
acknowledged write survives a power loss, a busy timeout, and transactions begun by us:
write transactions use ``BEGIN IMMEDIATE`` so two writers queue on the database lock instead of
failing when one upgrades a read lock. PostgreSQL: psycopg 3, READ COMMITTED, row locks where a
rule needs them; a connection whose server went away or stopped taking writes (a primary shut
down, or demoted to a standby by a failover manager such as Patroni) is invalidated with the
pool, so the next request connects again, to whichever server now takes writes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session

from metaservice.errors import InvalidRequestError

WRITE = {"metaservice_write": True}


class DatabaseURLError(ValueError):
    """The configured database URL cannot be used."""


SERVER_GONE_SQLSTATES = frozenset({
    "25006",  # read_only_sql_transaction: the server is a standby now (a demoted primary)
    "57P01",  # admin_shutdown: terminated by a shutdown (a failover manager's demotion)
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now: starting, shutting down or in recovery
})
"""SQLSTATEs that say the connection's server no longer takes this service's writes: the
connection is as good as lost (psycopg's own test, a closed or broken connection, misses a
standby's refusal, whose connection is healthy)."""


def server_gone(error: BaseException | None) -> bool:
    """Whether a driver error means the server is gone or no longer the primary."""
    return getattr(error, "sqlstate", None) in SERVER_GONE_SQLSTATES


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def on_postgres(session: Session) -> bool:
    """Whether the session's database is PostgreSQL (for statements written per dialect)."""
    return session.get_bind().dialect.name == "postgresql"


def dialect_insert(session: Session) -> Any:
    """The ``insert`` of the session's dialect (PostgreSQL's or SQLite's), for the statements
    that upsert or skip conflicts: ``on_conflict_do_nothing`` / ``do_update``."""
    return pg_insert if on_postgres(session) else sqlite_insert


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
        engine = create_engine(url, **kwargs)

        @event.listens_for(engine, "handle_error")
        def _server_gone(context: Any) -> None:
            # a disconnect: SQLAlchemy invalidates this connection and every other one the
            # pool holds (they all reach the same server), and the error is answered 503
            if server_gone(context.original_exception):
                context.is_disconnect = True

        return engine
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


__all__ = ["WRITE", "DatabaseURLError", "build_engine", "is_sqlite", "server_gone",
           "InvalidRequestError"]
