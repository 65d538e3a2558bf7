"""All SQL of the barrier protocol: recording completed barriers (the commit path under the
table lock), job progress, sink commits, fences. The reads of the barrier history that others
decide on (``snap(T, B)``, tails, first changes) are ``history/repository.py``'s. Every lookup is
an indexed seek on ``(table_id, barrier)``: an answer never scans barrier history."""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BindParameter,
    CompoundSelect,
    Row,
    Select,
    and_,
    bindparam,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.orm import Session

from metaservice.db import locks
from metaservice.db.models import (
    BarrierRow,
    IcebergTableRow,
    JobProgressRow,
    RollbackFenceRow,
    SnapshotExpirationRow,
    TableRow,
)
from metaservice.names import TableName


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
_iceberg_tables = IcebergTableRow.__table__


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

def _checks_select(table_id: BindParameter[int], barrier: BindParameter[int],
                   snapshot_id: BindParameter[int]) -> Select[Any]:
    """What a commit checks (:class:`CommitChecks`) for one table, barrier and snapshot."""
    existing = _barriers.alias("existing")
    return select(
        select(_fences.c.plan_id).where(_fences.c.table_id == table_id)
        .limit(1).scalar_subquery().label("fence_plan"),
        select(_barriers.c.barrier)
        .where(_barriers.c.table_id == table_id, _barriers.c.snapshot_id == snapshot_id,
               _barriers.c.rolled_back.is_(False))
        .order_by(_barriers.c.barrier.desc()).limit(1).scalar_subquery()
        .label("snapshot_barrier"),
        existing.c.snapshot_id.label("existing_snapshot_id"),
        existing.c.rolled_back.label("existing_rolled_back"),
        existing.c.writer_job.label("existing_writer_job"),
        select(_expirations.c.snapshot_id)
        .where(_expirations.c.table_id == table_id, _expirations.c.snapshot_id == snapshot_id)
        .limit(1).scalar_subquery().label("expiration"),
    ).select_from(
        select(literal(1).label("one")).subquery("one").outerjoin(
            existing, and_(existing.c.table_id == table_id, existing.c.barrier == barrier)))


_CHECKS = _checks_select(bindparam("table_id"), bindparam("barrier"), bindparam("snapshot_id"))


@functools.cache
def _group_checks(count: int) -> CompoundSelect:
    """:data:`_CHECKS` for ``count`` commits in one statement, each row tagged ``item``
    (built once per group size)."""
    return union_all(*(
        _checks_select(bindparam(f"t{i}"), bindparam(f"b{i}"), bindparam(f"s{i}"))
        .add_columns(literal_column(str(i)).label("item")) for i in range(count)))


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


_PEEK_MANY = select(
    _tables.c.id, _tables.c.catalog, _tables.c.database, _tables.c.name, _tables.c.catching_up,
    select(_iceberg_tables.c.version)
    .where(_tables.c.catalog == bindparam("catalog_name"),
           _iceberg_tables.c.namespace == _tables.c.database,
           _iceberg_tables.c.name == _tables.c.name)
    .limit(1).scalar_subquery().label("catalog_version"),
).where(tuple_(_tables.c.catalog, _tables.c.database, _tables.c.name)
        .in_(bindparam("names", expanding=True)))

_LOCK_MANY = (select(_tables.c.id, _tables.c.latest_barrier, _tables.c.latest_snapshot_id,
                     _tables.c.writer_job, _tables.c.catching_up)
              .where(_tables.c.id.in_(bindparam("table_ids", expanding=True)))
              .order_by(_tables.c.id).with_for_update())


@dataclass(frozen=True, slots=True)
class FoundTable:
    """What a group of commits needs to know of a table before locking it."""

    id: int
    catching_up: bool
    held_by_catalog: bool  # the built-in catalog holds it (its commits record its barriers)


def peek_tables(session: Session, names: Collection[TableName],
                catalog_name: str) -> dict[TableName, FoundTable]:
    """The tables that exist among ``names``, without a lock, in one statement: their ids (the
    lock order), whether they look catching up, and whether the built-in catalog (named
    ``catalog_name``) holds them (:func:`held_by_catalog`)."""
    if not names:
        return {}
    rows = session.execute(_PEEK_MANY, {
        "catalog_name": catalog_name,
        "names": [(n.catalog, n.database, n.table) for n in names]})
    return {TableName(r.catalog, r.database, r.name):
            FoundTable(r.id, bool(r.catching_up), r.catalog_version is not None) for r in rows}


def lock_tables(session: Session, ids: dict[TableName, int]) -> dict[int, LockedTable]:
    """Lock the table rows of a group of commits (``ids``: by name) in one statement, in id
    order, and read what each commit checks (:func:`lock_table`)."""
    wanted = sorted(set(ids.values()))
    if not wanted:
        return {}
    locks.check_tables(session, wanted)
    names = {table_id: str(name) for name, table_id in ids.items()}
    locked = {}
    for row in session.execute(_LOCK_MANY, {"table_ids": wanted}):
        locks.note_table_locked(session, row.id)
        locked[row.id] = LockedTable(row.id, names[row.id], row.latest_barrier,
                                     row.latest_snapshot_id, row.writer_job,
                                     bool(row.catching_up))
    return locked


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
    return _commit_checks(session.execute(_CHECKS, {"table_id": table_id, "barrier": barrier,
                                                    "snapshot_id": snapshot_id}).one())


def group_commit_checks(session: Session,
                        commits: Sequence[tuple[int, int, int]]) -> list[CommitChecks]:
    """:func:`commit_checks` of several ``(table_id, barrier, snapshot_id)`` in one
    statement, in their order."""
    if not commits:
        return []
    params = {}
    for i, (table_id, barrier, snapshot_id) in enumerate(commits):
        params[f"t{i}"], params[f"b{i}"], params[f"s{i}"] = table_id, barrier, snapshot_id
    rows = sorted(session.execute(_group_checks(len(commits)), params), key=lambda r: r.item)
    return [_commit_checks(row) for row in rows]


def _commit_checks(row: Row[Any]) -> CommitChecks:
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


@dataclass(frozen=True, slots=True)
class NewBarrier:
    """A barrier row to insert, completing ``barrier`` of ``table`` (locked) with a snapshot
    nobody wrote as a job (a root report)."""

    table: LockedTable
    barrier: int
    snapshot_id: int


def record_new_barriers(session: Session, new: Sequence[NewBarrier], committed_at: int) -> bool:
    """Insert the barrier rows of several tables and move each one's ``latest(T)`` forward, in
    two statements (each of its table once: :func:`write_completed` and :func:`advance_latest`
    for them all); False when a ``latest(T)`` did not move (a newer barrier was there)."""
    if not new:
        return True
    session.execute(_INSERT, [
        {"p_table_id": n.table.id, "p_barrier": n.barrier, "p_snapshot_id": n.snapshot_id,
         "p_committed_at": committed_at, "p_writer_job": None, "p_writer_run": None}
        for n in new])
    moved = session.execute(_ADVANCE, [
        {"p_table_id": n.table.id, "p_barrier": n.barrier, "p_snapshot_id": n.snapshot_id,
         "p_committed_at": committed_at} for n in new])
    if moved.rowcount != len(new):  # type: ignore[attr-defined]
        return False
    for n in new:
        n.table.latest_barrier, n.table.latest_snapshot_id = n.barrier, n.snapshot_id
    return True


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
