"""The request-level plumbing every endpoint uses: the session dependencies (which own commit
and rollback), the app-wide refusal of unstorable input, and their ``Annotated`` aliases. It
imports no domain: the authorisation dependency is ``auth/dependencies.py``, the root reports'
committer ``barriers/dependencies.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from metaservice.context import ServiceContext
from metaservice.db.session import Database
from metaservice.request_input import (
    InputProblem,
    document_problem,
    might_be_refused,
    parameters_problem,
)

# Dependencies that do no I/O are coroutines: FastAPI runs plain functions in its thread pool,
# a hop that costs more than what they do.

async def get_database(request: Request) -> Database:
    return request.app.state.database


async def get_context(request: Request) -> ServiceContext:
    return request.app.state.context


async def _session(request: Request, *, write: bool) -> AsyncIterator[Session]:
    """A session whose transaction the endpoint (in the thread pool) begins with its first
    statement; it ends here, in one more hop: commit on success, rollback on an exception."""
    session = request.app.state.database.session(write=write)
    try:
        yield session
    except BaseException:
        await run_in_threadpool(_rollback_and_close, session)
        raise
    await run_in_threadpool(_commit_and_close, session)


def _commit_and_close(session: Session) -> None:
    try:
        session.commit()
    except BaseException:
        _rollback_and_close(session)
        raise
    session.close()


def _rollback_and_close(session: Session) -> None:
    try:
        session.rollback()
    finally:
        session.close()


_transaction = asynccontextmanager(_session)


# ``async with``, not ``async for``: an exception thrown in at ``yield`` reaches _session, which
# rolls back before the error is answered. (Through ``async for`` it never did: _session was
# left suspended until garbage collection, its transaction open, on SQLite the write lock held.)
async def _read_session(request: Request) -> AsyncIterator[Session]:
    async with _transaction(request, write=False) as session:
        yield session


async def _write_session(request: Request) -> AsyncIterator[Session]:
    async with _transaction(request, write=True) as session:
        yield session


T = TypeVar("T")


class Transactions:
    """Transactions for an endpoint whose request picks its kind, or takes two: each commits
    on success and rolls back on an exception, before the response is sent, as the session
    dependencies do."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def transaction(self, *, write: bool) -> AbstractContextManager[Session]:
        return self._database.transaction(write=write)

    def read_then_write(self, read: Callable[[Session], T | None],
                        write: Callable[[Session], T]) -> T:
        """``read``'s answer from a read transaction; when it has none, ``write``'s from a write
        transaction. A request that usually changes nothing stays off the write path."""
        with self._database.transaction(write=False) as session:
            answer = read(session)
            if answer is not None:
                return answer
        with self._database.transaction(write=True) as session:
            return write(session)


async def get_transactions(request: Request) -> Transactions:
    return Transactions(request.app.state.database)


async def refuse_unstorable_input(request: Request) -> None:
    """The app-wide dependency that runs first: a request carrying text no database can store
    (a NUL, a lone surrogate) or JSON nested too deep, anywhere, is malformed (422, in the
    catalog 400) before anything reads or stores it (``request_input.py``)."""
    problem = (parameters_problem(request.path_params.items(), "path")
               or parameters_problem(request.query_params.multi_items(), "query"))
    if problem is None and getattr(request.scope.get("route"), "body_field", None) is not None:
        body = await request.body()
        if body and might_be_refused(body):
            try:
                document = await request.json()  # parsed already: the route reads JSON
            except (ValueError, RecursionError):
                document = None  # not JSON: the route's own validation refuses it
            problem = document_problem(document)
    if problem is not None:
        raise _invalid(problem)


def _invalid(problem: InputProblem) -> RequestValidationError:
    return RequestValidationError([{"type": "value_error", "loc": problem.location,
                                    "msg": problem.message, "input": None}])


# scope="function": the transaction commits before the response is sent.
ReadSession = Annotated[Session, Depends(_read_session, scope="function")]
WriteSession = Annotated[Session, Depends(_write_session, scope="function")]
Context = Annotated[ServiceContext, Depends(get_context)]
DatabaseDep = Annotated[Database, Depends(get_database)]
TransactionsDep = Annotated[Transactions, Depends(get_transactions)]
