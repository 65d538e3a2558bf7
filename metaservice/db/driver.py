"""Constant statements of the hot paths, run on the driver's own cursor.

On ``next`` and on root reports, SQLAlchemy's execution of a statement cost about as much CPU as
the driver's own work: the session's and the connection's bookkeeping, an execution context,
the result's metadata. A :class:`DriverStatement` is compiled by SQLAlchemy once per dialect
(its SQL, the order of its parameters, their types' conversions such as JSON, and the
conversions of its result columns) and then run by the driver itself, on the session's
connection and inside its transaction. As with ``Session.execute`` of a Core statement, the
session's pending ORM changes are not flushed first.

What the rest of the service relies on is kept: a driver error leaves as SQLAlchemy's own
exception (so the error handlers answer as they do for every other statement), and a lost
connection is invalidated as SQLAlchemy does, so the pool does not hand it out again. The
columns a statement selects are checked against its row's fields, once per dialect (a
``text()`` statement's on its first answer). Statements with expanding parameters (``IN``
lists built per call) are refused when compiled: their SQL is not constant.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from sqlalchemy import Connection, Dialect, exc
from sqlalchemy.orm import Session
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.selectable import SelectBase

from metaservice.db.engine import server_gone

RowT = TypeVar("RowT", bound=NamedTuple)

_Process = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    positional: tuple[str, ...] | None  # the parameters' order (a positional paramstyle)
    constants: dict[str, Any]  # the statement's own values (a LIMIT's)
    binds: tuple[tuple[str, _Process], ...]  # the parameters whose type converts them
    results: tuple[_Process | None, ...] | None  # per column; None: no column converts


class DriverStatement(Generic[RowT]):
    """``statement`` (constant: no expanding parameters), with the rows it selects read as
    ``shape``, whose fields must be its column names in order (or no ``shape``: a statement
    that selects nothing)."""

    def __init__(self, statement: ClauseElement, shape: type[RowT] | None = None) -> None:
        self._statement, self._shape = statement, shape
        self._compiled: dict[tuple[str, str], _Compiled] = {}  # by dialect and driver
        self._checked: set[tuple[str, str]] = set()  # its columns seen to be the shape's

    def rows(self, session: Session, params: Mapping[str, Any]) -> list[RowT]:
        """Run it in ``session``'s transaction; its rows, converted, as ``shape``."""
        shape = self._shape
        assert shape is not None, "a statement read as rows needs a shape"
        rows, compiled = self._run(session, params, fetch=True)
        make = shape._make
        if compiled.results is None:
            return [make(row) for row in rows]
        results = compiled.results
        return [make([value if process is None else process(value)
                      for process, value in zip(results, row, strict=True)]) for row in rows]

    def execute(self, session: Session, params: Mapping[str, Any]) -> int:
        """Run it in ``session``'s transaction; the number of rows it changed."""
        count, _ = self._run(session, params, fetch=False)
        return int(count)

    def _run(self, session: Session, params: Mapping[str, Any], *,
             fetch: bool) -> tuple[Any, _Compiled]:
        """The rows (``fetch``) or the row count, and the statement as compiled."""
        connection = session.connection()
        dialect = connection.dialect
        key = (dialect.name, dialect.driver)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = _compile(self._statement, dialect, self._shape)
        values = {**compiled.constants, **params}
        for name, process in compiled.binds:
            values[name] = process(values[name])
        args = values if compiled.positional is None else tuple(
            values[name] for name in compiled.positional)
        dbapi_connection = connection.connection.dbapi_connection
        assert dbapi_connection is not None
        cursor = None
        try:
            cursor = dbapi_connection.cursor()
            cursor.execute(compiled.sql, args)
            if not fetch:
                return cursor.rowcount, compiled
            if key not in self._checked:
                self._check_columns(cursor.description)
                self._checked.add(key)
            return cursor.fetchall(), compiled
        except dialect.loaded_dbapi.Error as error:
            raise _as_sqlalchemy_error(connection, compiled.sql, args, error, cursor) from None
        finally:
            if cursor is not None:
                cursor.close()

    def _check_columns(self, description: Any) -> None:
        assert self._shape is not None
        columns = tuple(column[0] for column in description or ())
        if columns != self._shape._fields:
            raise ValueError(f"the statement selects {columns}, not {self._shape._fields}")


def _compile(statement: ClauseElement, dialect: Dialect, shape: type[Any] | None) -> _Compiled:
    compiled = statement.compile(dialect=dialect)
    names = compiled.bind_names  # type: ignore[attr-defined]
    if any(getattr(bind, "expanding", False) for bind in names):
        raise ValueError("a statement with expanding parameters is not constant")
    constants = {names[bind]: bind.value for bind in names if not bind.required}
    binds = []
    for bind, name in names.items():
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            binds.append((name, process))
    results: tuple[_Process | None, ...] | None = None
    if isinstance(statement, SelectBase):
        columns = list(statement.selected_columns)
        if shape is not None and tuple(c.key for c in columns) != shape._fields:
            raise ValueError(f"the statement selects {tuple(c.key for c in columns)}, "
                             f"not {shape._fields}")
        processes = tuple(c.type.dialect_impl(dialect).result_processor(dialect, None)
                          for c in columns)
        if any(p is not None for p in processes):
            results = processes
    positiontup = compiled.positiontup  # type: ignore[attr-defined]
    return _Compiled(compiled.string, tuple(positiontup) if dialect.positional else None,
                     constants, tuple(binds), results)


def _as_sqlalchemy_error(connection: Connection, sql: str, args: Any, error: Any,
                         cursor: Any) -> exc.StatementError:
    """The exception SQLAlchemy raises for ``error``, with a lost connection invalidated."""
    dialect = connection.dialect
    dbapi_connection = connection.connection.dbapi_connection
    lost = dialect.is_disconnect(error, dbapi_connection, cursor) or server_gone(error)
    if lost:
        connection.invalidate(error)
    return exc.DBAPIError.instance(sql, args, error, dialect.loaded_dbapi.Error,
                                   connection_invalidated=lost, dialect=dialect)
