"""All SQL about table rows."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from sqlalchemy import and_, or_, select, tuple_
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from metaservice.db.models import TableRow
from metaservice.names import TableName


def ensure_tables(session: Session, names: Iterable[TableName], now_ms: int) -> dict[TableName, TableRow]:
    """Rows for ``names``, created when missing. Safe when two requests create the same table
    at once (INSERT … ON CONFLICT DO NOTHING, then read)."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
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
    if for_update:
        stmt = stmt.with_for_update().execution_options(populate_existing=True)
    rows = session.scalars(stmt).all()
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
        stmt = stmt.where(TableRow.name.in_({n.rsplit(".", 1)[-1] for n in wanted}))
    else:
        stmt = stmt.where(tuple_(TableRow.catalog, TableRow.database, TableRow.name).in_(
            [tuple(n.split(".", 2)) for n in wanted]))
    found: dict[str, tuple[int | None, str | None]] = {}
    for catalog, database, name, latest, writer in session.execute(stmt):
        qualified = f"{catalog}.{database}.{name}"
        if qualified in wanted:
            found[qualified] = (latest, writer)
    return found


def find_table(session: Session, name: TableName, *, for_update: bool = False) -> TableRow | None:
    return find_tables(session, [name], for_update=for_update).get(name)


def tables_by_id(session: Session, ids: Iterable[int]) -> dict[int, TableRow]:
    wanted = list(set(ids))
    if not wanted:
        return {}
    rows = session.scalars(select(TableRow).where(TableRow.id.in_(wanted))).all()
    return {r.id: r for r in rows}


def table_name(row: TableRow) -> TableName:
    return TableName(row.catalog, row.database, row.name)
