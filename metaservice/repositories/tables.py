"""All SQL about table rows."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import astuple, dataclass
from functools import cache
from typing import NamedTuple

from sqlalchemy import Select, and_, bindparam, or_, select, text, tuple_, update
from sqlalchemy.orm import Session

from metaservice.db import locks
from metaservice.db.engine import dialect_insert, on_postgres
from metaservice.db.models import TableRow, TopologyState
from metaservice.db.rows import named_rows
from metaservice.names import TableName, qualified


def ensure_tables(session: Session, names: Iterable[TableName],
                  now_ms: int) -> dict[TableName, TableRow]:
    """Rows for ``names``, created when missing. Safe when two requests create the same table
    at once (INSERT … ON CONFLICT DO NOTHING, then read)."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    insert = dialect_insert(session)
    stmt = insert(TableRow).values(
        [
            {"catalog": n.catalog, "database": n.database, "name": n.table, "created_at": now_ms}
            for n in wanted
        ]
    ).on_conflict_do_nothing(index_elements=["catalog", "database", "name"])
    session.execute(stmt)
    return find_tables(session, wanted)


def find_tables(session: Session, names: Iterable[TableName], *,
                for_update: bool = False) -> dict[TableName, TableRow]:
    wanted = list(set(names))
    if not wanted:
        return {}
    stmt = select(TableRow).where(
        or_(*[
            and_(TableRow.catalog == n.catalog, TableRow.database == n.database,
                 TableRow.name == n.table)
            for n in wanted
        ]) if len(wanted) <= 8 else
        tuple_(TableRow.catalog, TableRow.database, TableRow.name).in_(
            [(n.catalog, n.database, n.table) for n in wanted]
        )
    ).order_by(TableRow.id)
    rows = session.scalars(stmt).all()
    if for_update:  # found first, then locked in the lock order (by id) and re-read
        rows = list(locks.lock_tables(session, [r.id for r in rows]).values())
    return {TableName(r.catalog, r.database, r.name): r for r in rows}


# Above this many names, one single-column IN filtered here beats three bind parameters per
# name: rendering those cost more CPU than running the query.
_MANY_NAMES = 64


def latest_and_writers(session: Session,
                       names: Collection[str]) -> dict[str, tuple[int | None, str | None]]:
    """``(latest(T), running writer)`` by qualified name, as plain tuples: lineage answers read
    them for up to the whole topology on every request. Unknown names are absent."""
    wanted = set(names)
    if not wanted:
        return {}
    stmt = select(TableRow.catalog, TableRow.database, TableRow.name, TableRow.latest_barrier,
                  TableRow.writer_job)
    if len(wanted) > _MANY_NAMES:
        stmt = stmt.where(TableRow.name.in_({TableName.parse(n).table for n in wanted}))
    else:
        stmt = stmt.where(tuple_(TableRow.catalog, TableRow.database, TableRow.name).in_(
            [astuple(TableName.parse(n)) for n in wanted]))
    found: dict[str, tuple[int | None, str | None]] = {}
    for catalog, database, name, latest, writer in session.execute(stmt):
        table = qualified(catalog, database, name)
        if table in wanted:
            found[table] = (latest, writer)
    return found


def find_table(session: Session, name: TableName, *, for_update: bool = False) -> TableRow | None:
    return find_tables(session, [name], for_update=for_update).get(name)


def qualified_names(session: Session) -> list[str]:
    """Every known table's ``catalog.database.table``: the names an unknown table's error
    compares it with (that error is rare, so it reads them all)."""
    rows = session.execute(select(TableRow.catalog, TableRow.database, TableRow.name))
    return [qualified(c, d, n) for c, d, n in rows]


def tables_by_id(session: Session, ids: Iterable[int]) -> dict[int, TableRow]:
    wanted = list(set(ids))
    if not wanted:
        return {}
    rows = session.scalars(select(TableRow).where(TableRow.id.in_(wanted))).all()
    return {r.id: r for r in rows}


def table_name(row: TableRow) -> TableName:
    return TableName(row.catalog, row.database, row.name)


@dataclass(frozen=True, slots=True)
class CutState:
    """What a version answer needs of one table."""

    id: int
    latest: int | None
    catching_up: bool
    catch_up_floor: int | None = None


# A version answer runs this on every request, so the statement is built once and its text is
# constant (the driver prepares it; a query built per call cost more CPU than the database spent
# on it). PostgreSQL takes the names as three arrays: psycopg re-parses every statement of more
# than 50 parameters on each execution. SQLite takes one tuple IN per padded size.
_NAMES_PER_STATEMENT = 256

_CUT_STATES_POSTGRES = text(
    "SELECT t.id, t.catalog, t.database, t.name, t.latest_barrier, t.catching_up, "
    "  t.catch_up_floor, "
    "  (SELECT version FROM topology_state WHERE id = 1) AS topology_version "
    "FROM unnest(CAST(:catalogs AS text[]), CAST(:databases AS text[]), CAST(:names AS text[])) "
    "  AS w(catalog, database, name) "
    "JOIN tables t ON t.catalog = w.catalog AND t.database = w.database AND t.name = w.name")


_TOPOLOGY_VERSION = (select(TopologyState.version).where(TopologyState.id == 1)
                     .scalar_subquery().label("topology_version"))

# The columns of a CutState with the qualified name's parts, and the topology version (the same
# in every statement).
_CUT_STATE_COLUMNS = (TableRow.id, TableRow.catalog, TableRow.database, TableRow.name,
                      TableRow.latest_barrier, TableRow.catching_up, TableRow.catch_up_floor,
                      _TOPOLOGY_VERSION)


class _CutStateRow(NamedTuple):
    id: int
    catalog: str
    database: str
    name: str
    latest_barrier: int | None
    catching_up: bool
    catch_up_floor: int | None
    topology_version: int


def _cut_state(row: _CutStateRow) -> tuple[str, CutState]:
    return (qualified(row.catalog, row.database, row.name),
            CutState(row.id, row.latest_barrier, bool(row.catching_up), row.catch_up_floor))


@cache
def _cut_states_statement(size: int) -> Select:  # type: ignore[type-arg]
    return select(*_CUT_STATE_COLUMNS).where(
        # One OR of equalities, not a tuple IN: SQLite scans the whole table for a row-value
        # IN list, and seeks the unique index once per name for this.
        or_(*(and_(TableRow.catalog == bindparam(f"c{i}"),
                   TableRow.database == bindparam(f"d{i}"),
                   TableRow.name == bindparam(f"n{i}")) for i in range(size))))


def cut_states(session: Session, names: Iterable[str]) -> tuple[dict[str, CutState], int | None]:
    """``CutState`` by qualified name (unknown names are absent), and the topology version read
    by the same statement (``None`` when no name is known): a version answer saves a round
    trip with it."""
    wanted = [TableName.parse(n) for n in dict.fromkeys(names)]
    found: dict[str, CutState] = {}
    version: int | None = None
    if not wanted:
        return found, version
    if on_postgres(session):
        batches = [(_CUT_STATES_POSTGRES, {
            "catalogs": [n.catalog for n in wanted], "databases": [n.database for n in wanted],
            "names": [n.table for n in wanted]})]
    else:
        batches = []
        for start in range(0, len(wanted), _NAMES_PER_STATEMENT):
            chunk = wanted[start:start + _NAMES_PER_STATEMENT]
            size = 1 << (len(chunk) - 1).bit_length()  # powers of two: few statements
            params: dict[str, str] = {}
            for i in range(size):
                key = chunk[i] if i < len(chunk) else chunk[0]  # padding repeats a wanted name
                params[f"c{i}"], params[f"d{i}"], params[f"n{i}"] = (key.catalog, key.database,
                                                                     key.table)
            batches.append((_cut_states_statement(size), params))
    for statement, params in batches:
        for row in named_rows(session.execute(statement, params), _CutStateRow):
            name, state = _cut_state(row)
            found[name] = state
            version = row.topology_version
    return found, version


def lock_cut_states(session: Session, names: Iterable[str]) -> dict[str, CutState]:
    """``CutState`` of ``names`` with their rows locked (``db/locks.py``, by id)."""
    keys = [TableName.parse(n) for n in dict.fromkeys(names)]
    if not keys:
        return {}
    where = tuple_(TableRow.catalog, TableRow.database, TableRow.name).in_(
        [(k.catalog, k.database, k.table) for k in keys])
    locks.lock_tables(session, session.scalars(select(TableRow.id).where(where)).all())
    rows = session.execute(select(*_CUT_STATE_COLUMNS).where(where).order_by(TableRow.id))
    return dict(_cut_state(row) for row in named_rows(rows, _CutStateRow))


def set_catching_up(session: Session, table_id: int, catching_up: bool,
                    floor: int | None) -> None:
    session.execute(update(TableRow).where(TableRow.id == table_id)
                    .values(catching_up=catching_up, catch_up_floor=floor)
                    .execution_options(synchronize_session=False))
