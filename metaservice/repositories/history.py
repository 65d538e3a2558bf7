"""All SQL reading the barrier history: ``snap(T, B)``, many of them at once, each table's
newest rows and the first change after a barrier. Read by the versions' answers, the barrier
protocol, retention, rollback and lineage (through :mod:`metaservice.history.service` where they
decide on exactness); written only by the barrier protocol (``repositories/barriers.py``). Every
lookup is an indexed seek on ``(table_id, barrier)``: an answer never scans barrier history."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import NamedTuple

from sqlalchemy import bindparam, select, text
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import TextClause

from metaservice.db.driver import DriverStatement
from metaservice.db.engine import on_postgres
from metaservice.db.models import BarrierRow
from metaservice.db.rows import named_rows

_barriers = BarrierRow.__table__


def snap(session: Session, table_id: int, barrier: int) -> BarrierRow | None:
    """``snap(T, B)``: the row completing the greatest barrier ≤ B that is not rolled back."""
    return session.scalars(
        select(BarrierRow)
        .where(BarrierRow.table_id == table_id, BarrierRow.barrier <= barrier,
               BarrierRow.rolled_back.is_(False))
        .order_by(BarrierRow.barrier.desc())
        .limit(1)
    ).first()


@dataclass(frozen=True, slots=True)
class Snap:
    """``snap(T, B)`` as a version answer needs it: the row's barrier and snapshot, and whether
    the snapshot is approved for expiration (it must not be handed out then,
    docs/contract.md#expired-snapshots-stay-gone)."""

    barrier: int
    snapshot_id: int
    approved_for_expiration: bool


class _SnapRow(NamedTuple):
    table_id: int
    barrier: int
    snapshot_id: int
    approved: bool


_SNAPS_PER_STATEMENT = 256

# Each seek is the same indexed descent as :func:`snap`; the expiration check is a primary-key
# probe. ``cuts`` is a VALUES list on SQLite and two arrays on PostgreSQL (psycopg re-parses
# every statement of more than 50 parameters on each execution).
_SNAPS_QUERY = (
    "WITH cuts (table_id, cut) AS ({cuts}) "
    "SELECT cuts.table_id, b.barrier, b.snapshot_id, EXISTS ("
    "  SELECT 1 FROM snapshot_expirations e"
    "  WHERE e.table_id = b.table_id AND e.snapshot_id = b.snapshot_id) AS approved "
    "FROM cuts JOIN barriers b ON b.table_id = cuts.table_id AND b.barrier = ("
    "  SELECT s.barrier FROM barriers s"
    "  WHERE s.table_id = cuts.table_id AND s.barrier <= cuts.cut AND NOT s.rolled_back"
    "  ORDER BY s.barrier DESC LIMIT 1)")

_SNAPS_POSTGRES = text(_SNAPS_QUERY.format(
    cuts="SELECT * FROM unnest(CAST(:tables AS bigint[]), CAST(:cuts AS bigint[]))"))


@cache
def _snaps_statement(size: int) -> TextClause:
    """``size`` snap seeks in one statement, built once per size (constant text: the driver
    prepares it)."""
    values = ", ".join(f"(:t{i}, :b{i})" for i in range(size))
    return text(_SNAPS_QUERY.format(cuts=f"VALUES {values}"))


def snaps(session: Session, cuts: Mapping[int, int]) -> dict[int, Snap]:
    """``snap(T, B)`` of many tables (``{table_id: B}``): one round trip on PostgreSQL, one per
    256 tables on SQLite. Tables with no such row are absent."""
    if not cuts:
        return {}
    if on_postgres(session):
        rows = session.execute(_SNAPS_POSTGRES, {"tables": list(cuts), "cuts": list(cuts.values())})
        return {r.table_id: Snap(r.barrier, r.snapshot_id, bool(r.approved))
                for r in named_rows(rows, _SnapRow)}
    found: dict[int, Snap] = {}
    items = list(cuts.items())
    for start in range(0, len(items), _SNAPS_PER_STATEMENT):
        chunk = items[start:start + _SNAPS_PER_STATEMENT]
        size = 1 << (len(chunk) - 1).bit_length()  # powers of two: few statements
        chunk += [chunk[0]] * (size - len(chunk))  # padding repeats a wanted seek
        params: dict[str, int] = {}
        for i, (table_id, barrier) in enumerate(chunk):
            params[f"t{i}"], params[f"b{i}"] = table_id, barrier
        for r in named_rows(session.execute(_snaps_statement(size), params), _SnapRow):
            found[r.table_id] = Snap(r.barrier, r.snapshot_id, bool(r.approved))
    return found


_TAIL_POSTGRES = text(
    "SELECT w.id, b.barrier, b.snapshot_id "
    "FROM unnest(CAST(:ids AS integer[])) AS w(id) CROSS JOIN LATERAL ("
    "  SELECT s.barrier, s.snapshot_id FROM barriers s"
    "  WHERE s.table_id = w.id AND NOT s.rolled_back"
    "  ORDER BY s.barrier DESC LIMIT :depth) AS b")


_NO_TABLE = -1  # table ids are positive


class _TailRow(NamedTuple):
    id: int
    barrier: int
    snapshot_id: int


@cache
def _tail_statement(size: int) -> TextClause:
    """The newest rows of ``size`` tables, one indexed descent each, in one statement."""
    parts = [f"SELECT * FROM (SELECT :t{i} AS id, barrier, snapshot_id FROM barriers "
             f"WHERE table_id = :t{i} AND NOT rolled_back ORDER BY barrier DESC LIMIT :depth)"
             for i in range(size)]
    return text(" UNION ALL ".join(parts))


def tails(session: Session, table_ids: list[int],
          depth: int) -> dict[int, list[tuple[int, int]]]:
    """The ``depth`` newest ``(barrier, snapshot_id)`` of each table, newest first."""
    found: dict[int, list[tuple[int, int]]] = {t: [] for t in table_ids}
    if not table_ids:
        return found
    rows: list[_TailRow] = []
    if on_postgres(session):
        rows += named_rows(session.execute(_TAIL_POSTGRES, {"ids": list(table_ids),
                                                            "depth": depth}), _TailRow)
    else:
        unique = list(dict.fromkeys(table_ids))
        for start in range(0, len(unique), 64):
            chunk = unique[start:start + 64]
            size = 1 << (len(chunk) - 1).bit_length()
            # Padded with an id no table has: a repeated table would read its rows again.
            chunk = chunk + [_NO_TABLE] * (size - len(chunk))
            params: dict[str, int] = {f"t{i}": t for i, t in enumerate(chunk)}
            params["depth"] = depth
            rows += named_rows(session.execute(_tail_statement(size), params), _TailRow)
    for r in rows:
        found[int(r.id)].append((int(r.barrier), int(r.snapshot_id)))
    for rows_of_table in found.values():
        rows_of_table.sort(reverse=True)
    return found


_SNAP_SEEK = (select(_barriers.c.barrier, _barriers.c.snapshot_id)
              .where(_barriers.c.table_id == bindparam("table_id"),
                     _barriers.c.barrier <= bindparam("barrier"),
                     _barriers.c.rolled_back.is_(False))
              .order_by(_barriers.c.barrier.desc()).limit(1))

_FIRST_AFTER = (select(_barriers.c.barrier, _barriers.c.snapshot_id)
                .where(_barriers.c.table_id == bindparam("table_id"),
                       _barriers.c.barrier > bindparam("after"),
                       _barriers.c.barrier <= bindparam("upto"),
                       _barriers.c.rolled_back.is_(False))
                .order_by(_barriers.c.barrier.asc()).limit(64))


def snap_seek(session: Session, table_id: int, barrier: int) -> tuple[int, int] | None:
    """``snap(T, B)`` as ``(barrier, snapshot_id)``."""
    row = session.execute(_SNAP_SEEK, {"table_id": table_id, "barrier": barrier}).first()
    return None if row is None else (int(row.barrier), int(row.snapshot_id))


def first_change(session: Session, table_id: int, after: int, snapshot_id: int | None,
                 upto: int) -> int | None:
    """The first barrier in ``(after, upto]`` whose snapshot is not ``snapshot_id``. The rows
    with the same snapshot are heartbeats of one snapshot: few, read in order."""
    while True:
        rows = session.execute(_FIRST_AFTER, {"table_id": table_id, "after": after,
                                              "upto": upto}).all()
        for r in rows:
            if snapshot_id is None or r.snapshot_id != snapshot_id:
                return int(r.barrier)
        if len(rows) < 64:
            return None
        after = int(rows[-1].barrier)


class StateAndTailRow(NamedTuple):
    """A table's state and one of its newest rows (``barrier`` None: the table has none)."""

    id: int
    catalog: str
    database: str
    name: str
    latest_barrier: int | None
    catching_up: bool
    catch_up_floor: int | None
    barrier: int | None
    snapshot_id: int | None


_STATES_AND_TAILS_POSTGRES = DriverStatement(text(
    "SELECT t.id, t.catalog, t.database, t.name, t.latest_barrier, t.catching_up, "
    "  t.catch_up_floor, b.barrier, b.snapshot_id "
    "FROM unnest(CAST(:catalogs AS text[]), CAST(:databases AS text[]), CAST(:names AS text[])) "
    "  AS w(catalog, database, name) "
    "JOIN tables t ON t.catalog = w.catalog AND t.database = w.database AND t.name = w.name "
    "LEFT JOIN LATERAL ("
    "  SELECT s.barrier, s.snapshot_id FROM barriers s"
    "  WHERE s.table_id = t.id AND NOT s.rolled_back"
    "  ORDER BY s.barrier DESC LIMIT :depth) AS b ON true"), StateAndTailRow)


def states_and_tails_postgres(session: Session, names: list[tuple[str, str, str]],
                              depth: int) -> list[StateAndTailRow]:
    """The states of the tables named ``(catalog, database, table)`` and the ``depth`` newest
    rows of each, in one statement (PostgreSQL: a lateral join; elsewhere the states and
    :func:`tails` are two)."""
    return _STATES_AND_TAILS_POSTGRES.rows(session, {
        "catalogs": [n[0] for n in names], "databases": [n[1] for n in names],
        "names": [n[2] for n in names], "depth": depth})
