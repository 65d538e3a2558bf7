"""Dependency aliases used by every endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from metaservice.auth.service import Principal, authorize
from metaservice.context import ServiceContext
from metaservice.db.session import Database


def get_database(request: Request) -> Database:
    return request.app.state.database


def get_context(request: Request) -> ServiceContext:
    return request.app.state.context


def _read_session(request: Request) -> Iterator[Session]:
    with get_database(request).transaction(write=False) as session:
        yield session


def _write_session(request: Request) -> Iterator[Session]:
    with get_database(request).transaction(write=True) as session:
        yield session


# scope="function": the transaction commits before the response is sent.
ReadSession = Annotated[Session, Depends(_read_session, scope="function")]
WriteSession = Annotated[Session, Depends(_write_session, scope="function")]
Context = Annotated[ServiceContext, Depends(get_context)]
DatabaseDep = Annotated[Database, Depends(get_database)]
CurrentPrincipal = Annotated[Principal, Depends(authorize)]
