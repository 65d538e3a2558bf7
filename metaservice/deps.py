"""Dependency aliases used by every endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from metaservice.auth.service import Principal, authorize
from metaservice.context import ServiceContext
from metaservice.db.session import Database

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


async def _read_session(request: Request) -> AsyncIterator[Session]:
    async for session in _session(request, write=False):
        yield session


async def _write_session(request: Request) -> AsyncIterator[Session]:
    async for session in _session(request, write=True):
        yield session


# scope="function": the transaction commits before the response is sent.
ReadSession = Annotated[Session, Depends(_read_session, scope="function")]
WriteSession = Annotated[Session, Depends(_write_session, scope="function")]
Context = Annotated[ServiceContext, Depends(get_context)]
DatabaseDep = Annotated[Database, Depends(get_database)]
CurrentPrincipal = Annotated[Principal, Depends(authorize)]
