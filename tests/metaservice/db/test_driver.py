"""Statements run on the driver's cursor (``metaservice/db/driver.py``) answer as SQLAlchemy's
execution of the same statement does, on both backends: the same rows with the same types,
parameters converted by their types, the session's pending changes as SQLAlchemy treats them
for Core, columns checked against the row's fields, and errors raised as SQLAlchemy's own with
a lost connection invalidated."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
from sqlalchemy import JSON, BigInteger, bindparam, exc, insert, literal_column, select, text

from metaservice.db.driver import DriverStatement
from metaservice.db.models import JobRow, TableRow
from metaservice.db.session import Database

_tables = TableRow.__table__
_jobs = JobRow.__table__


class _Table(NamedTuple):
    id: int
    name: str
    catching_up: bool
    latest_barrier: int | None


_TABLES = (select(_tables.c.id, _tables.c.name, _tables.c.catching_up, _tables.c.latest_barrier)
           .where(_tables.c.database == bindparam("database"))
           .order_by(_tables.c.id).limit(2))


class _Pin(NamedTuple):
    name: str
    pinned_snapshots: Any
    pinned_barrier: int | None


_PINS = select(_jobs.c.name, _jobs.c.pinned_snapshots, _jobs.c.pinned_barrier).order_by(
    _jobs.c.name)

# Typed parameters: a JSON value serialised, a NULL typed as a barrier.
_PIN = text("UPDATE jobs SET pinned_snapshots = :snapshots, pinned_barrier = :barrier "
            "WHERE name = :name").bindparams(bindparam("snapshots", type_=JSON),
                                             bindparam("barrier", type_=BigInteger))


def _add_tables(database: Database) -> None:
    with database.transaction(write=True) as session:
        for i, catching_up in enumerate((False, True, False)):
            session.add(TableRow(catalog="c", database="d", name=f"t{i}", created_at=0,
                                 latest_barrier=None if i == 0 else 10 * i,
                                 catching_up=catching_up))
        session.add(JobRow(name="j", state="running", run=1, registered_at=0, updated_at=0))


def test_rows_are_sqlalchemys_with_the_same_types(database: Database) -> None:
    _add_tables(database)
    driver = DriverStatement(_TABLES, _Table)
    with database.transaction(write=False) as session:
        expected = [_Table(*row) for row in session.execute(_TABLES, {"database": "d"})]
        got = driver.rows(session, {"database": "d"})
    assert got == expected and len(got) == 2  # the statement's own LIMIT applied
    assert [type(r.catching_up) for r in got] == [bool, bool]  # SQLite's 0/1 converted
    assert got[0].latest_barrier is None and got[1].latest_barrier == 10


def test_typed_parameters_are_converted_and_json_read_back(database: Database) -> None:
    _add_tables(database)
    write = DriverStatement(_PIN)
    with database.transaction(write=True) as session:
        assert write.execute(session, {"snapshots": {"c.d.t0": {"barrier": 5}},
                                       "barrier": None, "name": "j"}) == 1
        assert write.execute(session, {"snapshots": None, "barrier": 1,
                                       "name": "nobody"}) == 0
    with database.transaction(write=False) as session:
        pins = DriverStatement(_PINS, _Pin).rows(session, {})
        assert pins == [_Pin(*row) for row in session.execute(_PINS)]
    assert pins == [_Pin("j", {"c.d.t0": {"barrier": 5}}, None)]


def test_pending_changes_are_flushed_as_sqlalchemy_flushes_them_for_core(
        database: Database) -> None:
    """Not at all: ``Session.execute`` of a Core statement does not autoflush, and neither does
    the driver, so the order of writes on the hot paths is what it was."""
    with database.transaction(write=True) as session:
        session.add(TableRow(catalog="c", database="pending", name="t", created_at=0))
        expected = [_Table(*row) for row in session.execute(_TABLES, {"database": "pending"})]
        assert DriverStatement(_TABLES, _Table).rows(session, {"database": "pending"}) == expected
        session.flush()
        assert [r.name for r in DriverStatement(_TABLES, _Table).rows(
            session, {"database": "pending"})] == ["t"]


def test_statements_that_are_not_constant_or_not_their_shape_are_refused(
        database: Database) -> None:
    expanding = select(_tables.c.id).where(_tables.c.id.in_(bindparam("ids", expanding=True)))
    other_shape = select(_tables.c.id, literal_column("1").label("one"))
    reordered = text("SELECT id, catching_up, name, latest_barrier FROM tables")
    with database.transaction(write=False) as session:
        with pytest.raises(ValueError, match="expanding"):
            DriverStatement(expanding).execute(session, {"ids": [1]})
        with pytest.raises(ValueError, match="not"):
            DriverStatement(other_shape, _Table).rows(session, {})
        with pytest.raises(ValueError, match="not"):  # text: checked on its first answer
            DriverStatement(reordered, _Table).rows(session, {})


def test_a_driver_error_is_sqlalchemys_and_rolls_back(database: Database) -> None:
    _add_tables(database)
    duplicate = DriverStatement(insert(_jobs).values(
        name=bindparam("name"), state="running", run=1, registered_at=0, updated_at=0))
    with pytest.raises(exc.IntegrityError) as raised, database.transaction(
            write=True) as session:
        duplicate.execute(session, {"name": "fresh"})
        duplicate.execute(session, {"name": "j"})
    assert not raised.value.connection_invalidated
    with database.transaction(write=False) as session:  # "fresh" was rolled back with it
        assert [p.name for p in DriverStatement(_PINS, _Pin).rows(session, {})] == ["j"]


def test_a_lost_connection_is_invalidated_and_not_handed_out_again(database: Database) -> None:
    if database.dialect != "postgresql":
        pytest.skip("ending another session's connection needs PostgreSQL")
    _add_tables(database)
    driver = DriverStatement(_TABLES, _Table)
    with pytest.raises(exc.OperationalError) as raised, database.transaction(
            write=False) as session:
        pid = session.connection().connection.dbapi_connection.info.backend_pid  # type: ignore[union-attr]
        with database.engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        driver.rows(session, {"database": "d"})
    assert raised.value.connection_invalidated
    with database.transaction(write=False) as session:
        assert session.connection().connection.dbapi_connection.info.backend_pid != pid  # type: ignore[union-attr]
        assert len(driver.rows(session, {"database": "d"})) == 2
