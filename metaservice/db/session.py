"""Sessions: one per request, one transaction per session.

The request-scoped dependency commits when the endpoint returns and rolls back when it raises;
nothing else calls ``commit()``. The commit happens before the response is sent, so an
acknowledged write is durable.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from metaservice.db.engine import WRITE


class Database:
    """The engine and its two session factories (read and write)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._read = sessionmaker(bind=engine, expire_on_commit=False, autoflush=True)
        self._write = sessionmaker(
            bind=engine.execution_options(**WRITE), expire_on_commit=False, autoflush=True
        )

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def read_session(self) -> Session:
        """A plain session for short reads outside a request's transaction."""
        return self._read()

    def session(self, *, write: bool) -> Session:
        """A new session; its transaction begins with its first statement."""
        return (self._write if write else self._read)()

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[Session]:
        with _transaction(self.session(write=write)) as session:
            yield session

    def held_connection(self) -> Connection:
        """A write connection held by a long-lived worker (the root reports' committer) for
        many transactions (:meth:`transaction_on`): they skip the pool's checkout and its
        liveness check, a round trip each. The holder closes it after a failed transaction,
        so a lost connection is not used twice."""
        return self.engine.connect().execution_options(**WRITE)

    @contextmanager
    def transaction_on(self, connection: Connection) -> Iterator[Session]:
        """:meth:`transaction` on a connection of :meth:`held_connection`."""
        with _transaction(Session(bind=connection, expire_on_commit=False,
                                  autoflush=True)) as session:
            yield session

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection for the reads of a hot path (a table load): plain Core statements,
        without an ORM session's per-statement work; its transaction is rolled back at the
        end, so it can never write."""
        with self.engine.connect() as connection:
            yield connection

    def dispose(self) -> None:
        self.engine.dispose()


@contextmanager
def _transaction(session: Session) -> Iterator[Session]:
    """The session's one transaction: committed when the block ends, else rolled back."""
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
