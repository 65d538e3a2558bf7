"""All SQL about completed barriers and job progress. Every lookup is an indexed seek on
``(table_id, barrier)``: an answer never scans barrier history."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import cache
from typing import NamedTuple

from sqlalchemy import (
    and_,
    bindparam,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import TextClause

from metaservice.db import locks
from metaservice.db.engine import on_postgres
from metaservice.db.models import (
    BarrierRow,
    IcebergTableRow,
    JobProgressRow,
    RollbackFenceRow,
    SnapshotExpirationRow,
    TableRow,
)
from metaservice.db.rows import named_rows
from metaservice.names import TableName


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
    the snapshot is approved for expiration (it must not be handed out then, SPEC §3.5)."""

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


def first_at_or_after(session: Session, table_id: int, barrier: int) -> BarrierRow | None:
    return session.scalars(
        select(BarrierRow)
        .where(BarrierRow.table_id == table_id, BarrierRow.barrier >= barrier,
               BarrierRow.rolled_back.is_(False))
        .order_by(BarrierRow.barrier.asc())
        .limit(1)
    ).first()








def history(session: Session, table_id: int, *, before: int | None, limit: int) -> list[BarrierRow]:
    stmt = select(BarrierRow).where(BarrierRow.table_id == table_id)
    if before is not None:
        stmt = stmt.where(BarrierRow.barrier < before)
    return list(session.scalars(stmt.order_by(BarrierRow.barrier.desc()).limit(limit)))


def committed_sinks(session: Session, job: str, barrier: int) -> set[int]:
    """The tables holding a snapshot of ``barrier`` written by ``job`` (in any run)."""
    return set(session.scalars(
        select(BarrierRow.table_id).where(BarrierRow.writer_job == job,
                                          BarrierRow.barrier == barrier,
                                          BarrierRow.rolled_back.is_(False))
    ))


def rolled_back_in_any(session: Session, table_ids: list[int], barrier: int) -> bool:
    """Whether ``barrier`` of one of the tables was taken back by a rollback."""
    if not table_ids:
        return False
    return session.scalar(
        select(BarrierRow.table_id)
        .where(BarrierRow.table_id.in_(table_ids), BarrierRow.barrier == barrier,
               BarrierRow.rolled_back.is_(True))
        .limit(1)
    ) is not None


def progress(session: Session, job: str, run: int, barrier: int) -> JobProgressRow | None:
    return session.get(JobProgressRow, (job, run, barrier))


def progress_history(session: Session, job: str, *, limit: int,
                     before: int | None = None) -> list[JobProgressRow]:
    stmt = select(JobProgressRow).where(JobProgressRow.job_name == job)
    if before is not None:
        stmt = stmt.where(JobProgressRow.barrier < before)
    return list(session.scalars(
        stmt.order_by(JobProgressRow.barrier.desc(), JobProgressRow.run.desc()).limit(limit)
    ))





@dataclass(frozen=True, slots=True)
class SinkCommit:
    """A snapshot a job committed to one of its sinks."""

    table: str
    snapshot_id: int
    committed_at: int


def sink_commits(session: Session, job: str,
                 barriers: Collection[int]) -> dict[tuple[int, int | None], list[SinkCommit]]:
    """The snapshots ``job`` committed at ``barriers``, by (barrier, run), each list in table
    order."""
    if not barriers:
        return {}
    rows = session.execute(
        select(BarrierRow.barrier, BarrierRow.writer_run, BarrierRow.snapshot_id,
               BarrierRow.committed_at, TableRow.catalog, TableRow.database, TableRow.name)
        .join(TableRow, TableRow.id == BarrierRow.table_id)
        .where(BarrierRow.writer_job == job, BarrierRow.barrier.in_(set(barriers))))
    commits: dict[tuple[int, int | None], list[SinkCommit]] = {}
    for r in rows:
        commits.setdefault((r.barrier, r.writer_run), []).append(
            SinkCommit(f"{r.catalog}.{r.database}.{r.name}", r.snapshot_id, r.committed_at))
    for found in commits.values():
        found.sort(key=lambda c: c.table)
    return commits

# -- the commit path ------------------------------------------------------------------------
# Every accepted commit and root report runs these statements, so they are plain Core
# statements built once with bind parameters: building an ORM query per call cost more CPU than
# the database spent running it.

_tables = TableRow.__table__
_barriers = BarrierRow.__table__
_fences = RollbackFenceRow.__table__
_expirations = SnapshotExpirationRow.__table__


@dataclass(slots=True)
class LockedTable:
    """What a commit needs of a table row it holds locked."""

    id: int
    name: str  # qualified
    latest_barrier: int | None
    latest_snapshot_id: int | None
    writer_job: str | None
    catching_up: bool


@dataclass(frozen=True, slots=True)
class RecordedBarrier:
    """A barrier row already recorded at the barrier a commit asks for."""

    snapshot_id: int
    rolled_back: bool
    writer_job: str | None


@dataclass(frozen=True, slots=True)
class CommitChecks:
    """What a commit must check in the barrier history, read in one statement under the lock."""

    fence_plan: str | None  # the rollback plan fencing the table
    existing: RecordedBarrier | None  # the row at the barrier
    snapshot_barrier: int | None  # the newest barrier the snapshot already completes
    expiration_approved: bool = False  # the snapshot is approved for expiration (or expired)


_PEEK = select(_tables.c.id, _tables.c.catching_up).where(
    _tables.c.catalog == bindparam("catalog"), _tables.c.database == bindparam("database"),
    _tables.c.name == bindparam("name"))

_LOCK = (select(_tables.c.latest_barrier, _tables.c.latest_snapshot_id, _tables.c.writer_job,
                _tables.c.catching_up)
         .where(_tables.c.id == bindparam("table_id")).with_for_update())

_existing = _barriers.alias("existing")
_CHECKS = select(
    select(_fences.c.plan_id).where(_fences.c.table_id == bindparam("table_id"))
    .limit(1).scalar_subquery().label("fence_plan"),
    select(_barriers.c.barrier)
    .where(_barriers.c.table_id == bindparam("table_id"),
           _barriers.c.snapshot_id == bindparam("snapshot_id"),
           _barriers.c.rolled_back.is_(False))
    .order_by(_barriers.c.barrier.desc()).limit(1).scalar_subquery().label("snapshot_barrier"),
    _existing.c.snapshot_id.label("existing_snapshot_id"),
    _existing.c.rolled_back.label("existing_rolled_back"),
    _existing.c.writer_job.label("existing_writer_job"),
    select(_expirations.c.snapshot_id)
    .where(_expirations.c.table_id == bindparam("table_id"),
           _expirations.c.snapshot_id == bindparam("snapshot_id"))
    .limit(1).scalar_subquery().label("expiration"),
).select_from(
    select(literal(1).label("one")).subquery("one").outerjoin(
        _existing, and_(_existing.c.table_id == bindparam("table_id"),
                        _existing.c.barrier == bindparam("barrier"))))

_INSERT = insert(_barriers).values(
    table_id=bindparam("p_table_id"), barrier=bindparam("p_barrier"),
    snapshot_id=bindparam("p_snapshot_id"), committed_at=bindparam("p_committed_at"),
    writer_job=bindparam("p_writer_job"), writer_run=bindparam("p_writer_run"),
    rolled_back=False)

_RECOMPLETE = (update(_barriers)
               .where(_barriers.c.table_id == bindparam("p_table_id"),
                      _barriers.c.barrier == bindparam("p_barrier"),
                      _barriers.c.rolled_back.is_(True))
               .values(snapshot_id=bindparam("p_snapshot_id"),
                       committed_at=bindparam("p_committed_at"),
                       writer_job=bindparam("p_writer_job"),
                       writer_run=bindparam("p_writer_run"), rolled_back=False))

_ADVANCE = (update(_tables)
            .where(_tables.c.id == bindparam("p_table_id"),
                   or_(_tables.c.latest_barrier.is_(None),
                       _tables.c.latest_barrier < bindparam("p_barrier")))
            .values(latest_barrier=bindparam("p_barrier"),
                    latest_snapshot_id=bindparam("p_snapshot_id"),
                    latest_committed_at=bindparam("p_committed_at")))


def peek_table(session: Session, name: TableName) -> tuple[int, bool] | None:
    """``(id, catching_up)`` without a lock: which locks a commit must take, in which order."""
    row = session.execute(_PEEK, {"catalog": name.catalog, "database": name.database,
                                  "name": name.table}).first()
    return None if row is None else (row.id, bool(row.catching_up))


def lock_table(session: Session, table_id: int, name: str) -> LockedTable | None:
    """Lock the table row for a commit (a row lock on PostgreSQL; SQLite's write transaction
    already excludes every other writer) and read what the commit checks."""
    locks.check_table(session, table_id)
    row = session.execute(_LOCK, {"table_id": table_id}).first()
    if row is None:
        return None
    locks.note_table_locked(session, table_id)
    return LockedTable(table_id, name, row.latest_barrier, row.latest_snapshot_id, row.writer_job,
                       bool(row.catching_up))


def commit_checks(session: Session, table_id: int, barrier: int,
                  snapshot_id: int) -> CommitChecks:
    """Read under the table lock, so a fence or a row written before it was taken is seen."""
    row = session.execute(_CHECKS, {"table_id": table_id, "barrier": barrier,
                                    "snapshot_id": snapshot_id}).one()
    existing = (None if row.existing_snapshot_id is None
                else RecordedBarrier(int(row.existing_snapshot_id), bool(row.existing_rolled_back),
                                     row.existing_writer_job))
    return CommitChecks(row.fence_plan, existing, row.snapshot_barrier,
                        row.expiration is not None)


def write_completed(session: Session, table_id: int, *, barrier: int, snapshot_id: int,
                    committed_at: int, writer_job: str | None, writer_run: int | None,
                    recomplete: bool) -> None:
    """Insert the barrier row, or complete a rolled-back one again (``recomplete``)."""
    session.execute(_RECOMPLETE if recomplete else _INSERT, {
        "p_table_id": table_id, "p_barrier": barrier, "p_snapshot_id": snapshot_id,
        "p_committed_at": committed_at, "p_writer_job": writer_job, "p_writer_run": writer_run})


def advance_latest(session: Session, table: LockedTable, *, barrier: int, snapshot_id: int,
                   committed_at: int) -> bool:
    """Compare-and-swap ``latest(T)`` forward; False when a newer barrier is already there."""
    result = session.execute(_ADVANCE, {"p_table_id": table.id, "p_barrier": barrier,
                                        "p_snapshot_id": snapshot_id,
                                        "p_committed_at": committed_at})
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    table.latest_barrier, table.latest_snapshot_id = barrier, snapshot_id
    return True


# -- reads for exactness (``versions/history.py``) -------------------------------------------

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


def last_written_by(session: Session, job: str, sink_ids: list[int]) -> int | None:
    """The greatest barrier every one of ``sink_ids`` completed with a snapshot ``job`` wrote
    (in any run, not rolled back)."""
    if not sink_ids:
        return None
    return session.scalar(
        select(BarrierRow.barrier)
        .where(BarrierRow.writer_job == job, BarrierRow.table_id.in_(sink_ids),
               BarrierRow.rolled_back.is_(False))
        .group_by(BarrierRow.barrier)
        .having(func.count(func.distinct(BarrierRow.table_id)) == len(set(sink_ids)))
        .order_by(BarrierRow.barrier.desc()).limit(1))


def held_by_catalog(session: Session, name: TableName, catalog_name: str) -> bool:
    """Whether the built-in catalog (named ``catalog_name``) holds the table."""
    if name.catalog != catalog_name:
        return False
    return session.execute(select(IcebergTableRow.version).where(
        IcebergTableRow.namespace == name.database,
        IcebergTableRow.name == name.table)).first() is not None
