"""All SQL of the barrier protocol: recording completed barriers (the commit path under the
table lock), job progress, sink commits, fences. The reads of the barrier history that others
decide on (``snap(T, B)``, tails, first changes) are ``repositories/history.py``'s. Every lookup is
an indexed seek on ``(table_id, barrier)``: an answer never scans barrier history."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import (
    JSON,
    BigInteger,
    BindParameter,
    Integer,
    Select,
    and_,
    bindparam,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy.orm import Session

from metaservice.core.protocol import CommitChecks, RecordedBarrier
from metaservice.db import locks
from metaservice.db.driver import DriverStatement
from metaservice.db.engine import on_postgres
from metaservice.db.models import (
    BarrierRow,
    IcebergTableRow,
    JobProgressRow,
    JobRow,
    JobTableRow,
    RollbackFenceRow,
    SnapshotExpirationRow,
    TableRow,
    TopologyState,
)
from metaservice.names import TableName, qualified


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
            SinkCommit(qualified(r.catalog, r.database, r.name), r.snapshot_id, r.committed_at))
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


class _PeekRow(NamedTuple):
    id: int
    catching_up: bool


_PEEK = DriverStatement(select(_tables.c.id, _tables.c.catching_up).where(
    _tables.c.catalog == bindparam("catalog"), _tables.c.database == bindparam("database"),
    _tables.c.name == bindparam("name")), _PeekRow)


class _LockRow(NamedTuple):
    latest_barrier: int | None
    latest_snapshot_id: int | None
    writer_job: str | None
    catching_up: bool


_LOCK = DriverStatement(
    select(_tables.c.latest_barrier, _tables.c.latest_snapshot_id, _tables.c.writer_job,
           _tables.c.catching_up)
    .where(_tables.c.id == bindparam("table_id")).with_for_update(), _LockRow)

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


class _ChecksRow(NamedTuple):
    fence_plan: str | None
    snapshot_barrier: int | None
    existing_snapshot_id: int | None
    existing_rolled_back: bool | None
    existing_writer_job: str | None
    expiration: int | None


class _GroupChecksRow(NamedTuple):
    fence_plan: str | None
    snapshot_barrier: int | None
    existing_snapshot_id: int | None
    existing_rolled_back: bool | None
    existing_writer_job: str | None
    expiration: int | None
    item: int


_CHECKS = DriverStatement(_checks_select(bindparam("table_id"), bindparam("barrier"),
                                         bindparam("snapshot_id")), _ChecksRow)


@functools.cache
def _group_checks(count: int) -> DriverStatement[_GroupChecksRow]:
    """:data:`_CHECKS` for ``count`` commits in one statement, each row tagged ``item``
    (built once per group size)."""
    return DriverStatement(union_all(*(
        _checks_select(bindparam(f"t{i}"), bindparam(f"b{i}"), bindparam(f"s{i}"))
        .add_columns(literal_column(str(i), Integer).label("item")) for i in range(count))),
        _GroupChecksRow)


_INSERT = insert(_barriers).values(
    table_id=bindparam("p_table_id"), barrier=bindparam("p_barrier"),
    snapshot_id=bindparam("p_snapshot_id"), committed_at=bindparam("p_committed_at"),
    writer_job=bindparam("p_writer_job"), writer_run=bindparam("p_writer_run"),
    rolled_back=False)

_RECOMPLETE = DriverStatement(update(_barriers)
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


# One row at a time on the driver (a commit, a report alone); the statements themselves, many
# rows at a time (a group of root reports on SQLite).
_INSERT_ONE = DriverStatement(_INSERT)
_ADVANCE_ONE = DriverStatement(_ADVANCE)


class _GroupTableRow(NamedTuple):
    id: int
    catalog: str
    database: str
    name: str
    catching_up: bool
    latest_barrier: int | None
    latest_snapshot_id: int | None
    writer_job: str | None
    catalog_version: int | None


# A group's tables found by name and locked in one statement: ``ORDER BY id`` sorts the rows
# before they are locked (PostgreSQL locks the rows a locking SELECT returns, in the order it
# returns them), so the locks are taken in the lock order without reading the ids first. The
# names travel as arrays on PostgreSQL and as a JSON array on SQLite: the text is constant.
_LOCK_BY_NAME = (
    "SELECT t.id, t.catalog, t.database, t.name, t.catching_up, t.latest_barrier, "
    "  t.latest_snapshot_id, t.writer_job, ("
    "  SELECT c.version FROM catalog_tables c WHERE t.catalog = :catalog_name"
    "  AND c.namespace = t.database AND c.name = t.name) AS catalog_version "
    "FROM ({names}) AS w "
    "JOIN tables t ON t.catalog = w.catalog AND t.database = w.database AND t.name = w.name "
    "ORDER BY t.id{lock}")
_LOCK_BY_NAME_POSTGRES = DriverStatement(text(_LOCK_BY_NAME.format(
    names="SELECT * FROM unnest(CAST(:catalogs AS text[]), CAST(:databases AS text[]), "
          "CAST(:names AS text[])) AS n (catalog, database, name)",
    lock=" FOR UPDATE OF t")), _GroupTableRow)
_LOCK_BY_NAME_SQLITE = DriverStatement(text(_LOCK_BY_NAME.format(
    names="SELECT json_extract(value, '$[0]') AS catalog, json_extract(value, '$[1]') AS database, "
          "json_extract(value, '$[2]') AS name FROM json_each(:names)",
    lock="")), _GroupTableRow)


@dataclass(frozen=True, slots=True)
class GroupTable:
    """A table of a group of commits, locked: what each commit checks, and whether the
    built-in catalog holds it (:func:`held_by_catalog`, read without a lock of its own)."""

    table: LockedTable
    held_by_catalog: bool


def lock_tables_by_name(session: Session, names: Collection[TableName],
                        catalog_name: str) -> dict[TableName, GroupTable]:
    """Lock the rows of the tables that exist among ``names`` in one statement, in id order,
    and read what a commit checks of each (:func:`lock_table`) and whether the built-in catalog
    (named ``catalog_name``) holds it. Their ids are not known before, so this must be the
    transaction's first table lock."""
    if not names:
        return {}
    locks.check_first_tables(session)
    if on_postgres(session):
        rows = _LOCK_BY_NAME_POSTGRES.rows(session, {
            "catalog_name": catalog_name, "catalogs": [n.catalog for n in names],
            "databases": [n.database for n in names], "names": [n.table for n in names]})
    else:
        rows = _LOCK_BY_NAME_SQLITE.rows(session, {
            "catalog_name": catalog_name,
            "names": json.dumps([(n.catalog, n.database, n.table) for n in names])})
    found = {}
    for row in rows:
        locks.note_table_locked(session, row.id)
        name = TableName(row.catalog, row.database, row.name)
        found[name] = GroupTable(
            LockedTable(row.id, str(name), row.latest_barrier, row.latest_snapshot_id,
                        row.writer_job, bool(row.catching_up)),
            row.catalog_version is not None)
    return found


def peek_table(session: Session, name: TableName) -> tuple[int, bool] | None:
    """``(id, catching_up)`` without a lock: which locks a commit must take, in which order."""
    rows = _PEEK.rows(session, {"catalog": name.catalog, "database": name.database,
                                "name": name.table})
    return (rows[0].id, bool(rows[0].catching_up)) if rows else None


def lock_table(session: Session, table_id: int, name: str) -> LockedTable | None:
    """Lock the table row for a commit (a row lock on PostgreSQL; SQLite's write transaction
    already excludes every other writer) and read what the commit checks."""
    locks.check_table(session, table_id)
    rows = _LOCK.rows(session, {"table_id": table_id})
    if not rows:
        return None
    row = rows[0]
    locks.note_table_locked(session, table_id)
    return LockedTable(table_id, name, row.latest_barrier, row.latest_snapshot_id, row.writer_job,
                       bool(row.catching_up))


def commit_checks(session: Session, table_id: int, barrier: int,
                  snapshot_id: int) -> CommitChecks:
    """Read under the table lock, so a fence or a row written before it was taken is seen."""
    rows = _CHECKS.rows(session, {"table_id": table_id, "barrier": barrier,
                                  "snapshot_id": snapshot_id})
    return _commit_checks(rows[0])


def group_commit_checks(session: Session,
                        commits: Sequence[tuple[int, int, int]]) -> list[CommitChecks]:
    """:func:`commit_checks` of several ``(table_id, barrier, snapshot_id)`` in one
    statement, in their order."""
    if not commits:
        return []
    params = {}
    for i, (table_id, barrier, snapshot_id) in enumerate(commits):
        params[f"t{i}"], params[f"b{i}"], params[f"s{i}"] = table_id, barrier, snapshot_id
    rows = sorted(_group_checks(len(commits)).rows(session, params), key=lambda r: r.item)
    return [_commit_checks(row) for row in rows]


def _commit_checks(row: _ChecksRow | _GroupChecksRow) -> CommitChecks:
    existing = (None if row.existing_snapshot_id is None
                else RecordedBarrier(int(row.existing_snapshot_id), bool(row.existing_rolled_back),
                                     row.existing_writer_job))
    return CommitChecks(row.fence_plan, existing, row.snapshot_barrier,
                        row.expiration is not None)


def write_completed(session: Session, table_id: int, *, barrier: int, snapshot_id: int,
                    committed_at: int, writer_job: str | None, writer_run: int | None,
                    recomplete: bool) -> None:
    """Insert the barrier row, or complete a rolled-back one again (``recomplete``)."""
    (_RECOMPLETE if recomplete else _INSERT_ONE).execute(session, {
        "p_table_id": table_id, "p_barrier": barrier, "p_snapshot_id": snapshot_id,
        "p_committed_at": committed_at, "p_writer_job": writer_job, "p_writer_run": writer_run})


@dataclass(frozen=True, slots=True)
class NewBarrier:
    """A barrier row to insert, completing ``barrier`` of ``table`` (locked) with a snapshot
    nobody wrote as a job (a root report)."""

    table: LockedTable
    barrier: int
    snapshot_id: int


# PostgreSQL: a group's rows inserted and their tables' ``latest(T)`` moved in one statement
# (one round trip; each table once in a group).
_RECORD_NEW = DriverStatement(text("""
WITH new AS (
    SELECT * FROM unnest(CAST(:table_ids AS integer[]), CAST(:barriers AS bigint[]),
                         CAST(:snapshot_ids AS bigint[])) AS new (table_id, barrier, snapshot_id)
), written AS (
    INSERT INTO barriers (table_id, barrier, snapshot_id, committed_at, rolled_back)
    SELECT table_id, barrier, snapshot_id, :committed_at, false FROM new
)
UPDATE tables SET latest_barrier = new.barrier, latest_snapshot_id = new.snapshot_id,
                  latest_committed_at = :committed_at
FROM new
WHERE tables.id = new.table_id
  AND (tables.latest_barrier IS NULL OR tables.latest_barrier < new.barrier)"""))


def record_new_barriers(session: Session, new: Sequence[NewBarrier], committed_at: int) -> bool:
    """Insert the barrier rows of several tables, each once, and move each one's ``latest(T)``
    forward (:func:`write_completed` and :func:`advance_latest` for them all): one statement on
    PostgreSQL, two on SQLite; False when a ``latest(T)`` did not move (a newer barrier was
    there)."""
    if not new:
        return True
    if on_postgres(session):
        moved = _RECORD_NEW.execute(session, {
            "table_ids": [n.table.id for n in new], "barriers": [n.barrier for n in new],
            "snapshot_ids": [n.snapshot_id for n in new], "committed_at": committed_at})
    else:
        session.execute(_INSERT, [
            {"p_table_id": n.table.id, "p_barrier": n.barrier, "p_snapshot_id": n.snapshot_id,
             "p_committed_at": committed_at, "p_writer_job": None, "p_writer_run": None}
            for n in new])
        moved = session.execute(_ADVANCE, [
            {"p_table_id": n.table.id, "p_barrier": n.barrier, "p_snapshot_id": n.snapshot_id,
             "p_committed_at": committed_at} for n in new]).rowcount  # type: ignore[attr-defined]
    if moved != len(new):
        return False
    for n in new:
        n.table.latest_barrier, n.table.latest_snapshot_id = n.barrier, n.snapshot_id
    return True


def advance_latest(session: Session, table: LockedTable, *, barrier: int, snapshot_id: int,
                   committed_at: int) -> bool:
    """Compare-and-swap ``latest(T)`` forward; False when a newer barrier is already there."""
    moved = _ADVANCE_ONE.execute(session, {"p_table_id": table.id, "p_barrier": barrier,
                                           "p_snapshot_id": snapshot_id,
                                           "p_committed_at": committed_at})
    if moved != 1:
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


# -- the hand-out path (``next``) -------------------------------------------------------------
# Every ``next`` and start runs these, so they are constant statements too, one per step: the
# job locked and read, its edges with what the decision needs of them, the reads of the barrier
# being pinned (both ``snap`` reads of every source, their expiration checks and when the
# barrier was complete in each source), the progress record, the pin.

_jobs = JobRow.__table__
_job_tables = JobTableRow.__table__
_topology = TopologyState.__table__


@dataclass(slots=True)
class JobState:
    """What the barrier protocol reads and writes of a job row it holds locked."""

    name: str
    state: str
    run: int
    last_committed_barrier: int | None
    pinned_barrier: int | None
    pinned_after: int | None
    pinned_snapshots: dict[str, Any] | None
    pinned_previous: dict[str, Any] | None
    pin_invalidated_reason: str | None
    pinned_at: int | None = None  # set when the service pins a barrier (not read: not needed)

    @classmethod
    def of(cls, row: JobRow) -> JobState:
        """The state of a job row the ORM holds (a start's, which changes the row itself)."""
        return cls(row.name, row.state, row.run, row.last_committed_barrier, row.pinned_barrier,
                   row.pinned_after, row.pinned_snapshots, row.pinned_previous,
                   row.pin_invalidated_reason)


class _JobStateRow(NamedTuple):
    state: str
    run: int
    last_committed_barrier: int | None
    pinned_barrier: int | None
    pinned_after: int | None
    pinned_snapshots: dict[str, Any] | None
    pinned_previous: dict[str, Any] | None
    pin_invalidated_reason: str | None


_LOCK_JOB = DriverStatement(
    select(_jobs.c.state, _jobs.c.run, _jobs.c.last_committed_barrier, _jobs.c.pinned_barrier,
           _jobs.c.pinned_after, _jobs.c.pinned_snapshots, _jobs.c.pinned_previous,
           _jobs.c.pin_invalidated_reason)
    .where(_jobs.c.name == bindparam("name")).with_for_update(), _JobStateRow)


def lock_job_state(session: Session, name: str) -> JobState | None:
    """Lock the job's row (in the lock order, ``db/locks.py``) and read it; None when there is
    no such job."""
    locks.check_job(session, name)
    rows = _LOCK_JOB.rows(session, {"name": name})
    if not rows:
        return None
    locks.note_job_locked(session, name)
    return JobState(name, *rows[0])


class EdgeTable(NamedTuple):
    """A table a job reads or writes, as a decision about the job needs it."""

    id: int
    qualified_name: str
    latest_barrier: int | None


@dataclass(frozen=True, slots=True)
class JobEdges:
    sources: list[EdgeTable]  # by id
    sinks: list[EdgeTable]  # by id
    sinks_fenced: bool  # a sink is fenced by a rollback plan
    topology_version: int | None  # read by the same statement (None: the job has no edges)


class _EdgeRow(NamedTuple):
    role: str
    id: int
    catalog: str
    database: str
    name: str
    latest_barrier: int | None
    fenced: bool
    topology_version: int


_EDGES = DriverStatement(
    select(_job_tables.c.role, _tables.c.id, _tables.c.catalog, _tables.c.database,
           _tables.c.name, _tables.c.latest_barrier,
           select(_fences.c.table_id).where(_fences.c.table_id == _tables.c.id)
           .exists().label("fenced"),
           select(_topology.c.version).where(_topology.c.id == 1)
           .scalar_subquery().label("topology_version"))
    .join_from(_job_tables, _tables, _tables.c.id == _job_tables.c.table_id)
    .where(_job_tables.c.job_name == bindparam("job"))
    .order_by(_tables.c.id), _EdgeRow)


def job_edges(session: Session, job: str) -> JobEdges:
    """The job's sources and sinks, whether a sink is fenced and the topology version, in one
    statement. Read after the job's lock: a start that changed the topology is seen."""
    sources: list[EdgeTable] = []
    sinks: list[EdgeTable] = []
    fenced = False
    version: int | None = None
    for r in _EDGES.rows(session, {"job": job}):
        table = EdgeTable(r.id, qualified(r.catalog, r.database, r.name), r.latest_barrier)
        if r.role == "source":
            sources.append(table)
        else:
            sinks.append(table)
            fenced = fenced or bool(r.fenced)
        version = r.topology_version
    return JobEdges(sources, sinks, fenced, version)


@dataclass(frozen=True, slots=True)
class PinRead:
    """One source, for a barrier about to be pinned after ``after``."""

    table_id: int
    snap: tuple[int, int] | None  # snap(T, barrier): (barrier, snapshot_id)
    approved: bool  # its snapshot is approved for expiration
    previous: tuple[int, int] | None  # snap(T, after)
    previous_approved: bool
    ready_at: int | None  # when the first barrier ≥ barrier was completed


class _PinRow(NamedTuple):
    table_id: int
    barrier: int | None
    snapshot_id: int | None
    approved: bool
    previous_barrier: int | None
    previous_snapshot_id: int | None
    previous_approved: bool
    ready_at: int | None


# Three seeks on ``(table_id, barrier)`` per source and two primary-key probes of the
# expirations; ``sources`` is an array on PostgreSQL and a JSON array on SQLite, so the text is
# the same whatever the number of sources (prepared once by the driver).
_PIN_READS = (
    "WITH sources (table_id) AS ({sources}) "
    "SELECT sources.table_id, b.barrier, b.snapshot_id, EXISTS ("
    "  SELECT 1 FROM snapshot_expirations e"
    "  WHERE e.table_id = b.table_id AND e.snapshot_id = b.snapshot_id) AS approved, "
    "p.barrier AS previous_barrier, p.snapshot_id AS previous_snapshot_id, EXISTS ("
    "  SELECT 1 FROM snapshot_expirations e"
    "  WHERE e.table_id = p.table_id AND e.snapshot_id = p.snapshot_id) AS previous_approved, "
    "(SELECT r.committed_at FROM barriers r"
    "  WHERE r.table_id = sources.table_id AND r.barrier >= {barrier} AND NOT r.rolled_back"
    "  ORDER BY r.barrier ASC LIMIT 1) AS ready_at "
    "FROM sources "
    "LEFT JOIN barriers b ON b.table_id = sources.table_id AND b.barrier = ("
    "  SELECT s.barrier FROM barriers s"
    "  WHERE s.table_id = sources.table_id AND s.barrier <= {barrier} AND NOT s.rolled_back"
    "  ORDER BY s.barrier DESC LIMIT 1) "
    "LEFT JOIN barriers p ON p.table_id = sources.table_id AND p.barrier = ("
    "  SELECT s.barrier FROM barriers s"
    "  WHERE s.table_id = sources.table_id AND s.barrier <= {after} AND NOT s.rolled_back"
    "  ORDER BY s.barrier DESC LIMIT 1) "
    "ORDER BY sources.table_id")

_PIN_READS_POSTGRES = DriverStatement(text(_PIN_READS.format(
    sources="SELECT unnest(CAST(:sources AS integer[]))", barrier="CAST(:barrier AS bigint)",
    after="CAST(:after AS bigint)")), _PinRow)
_PIN_READS_SQLITE = DriverStatement(text(_PIN_READS.format(
    sources="SELECT CAST(value AS INTEGER) FROM json_each(:sources)", barrier=":barrier",
    after=":after")), _PinRow)


def pin_reads(session: Session, source_ids: list[int], barrier: int,
              after: int | None) -> list[PinRead]:
    """``snap`` of every source at ``barrier`` and at ``after`` with their expiration checks,
    and when ``barrier`` was complete in each, in one statement, by table id. Call after
    holding the sources (``retention/handout.py``): the checks must see an approval that
    came first."""
    ids: list[int] | str = list(source_ids)
    statement = _PIN_READS_POSTGRES
    if not on_postgres(session):
        statement, ids = _PIN_READS_SQLITE, json.dumps(ids)
    rows = statement.rows(session, {"sources": ids, "barrier": barrier, "after": after})
    return [PinRead(
        int(r.table_id),
        None if r.barrier is None else (int(r.barrier), int(r.snapshot_id or 0)),
        bool(r.approved),
        None if r.previous_barrier is None else (int(r.previous_barrier),
                                                 int(r.previous_snapshot_id or 0)),
        bool(r.previous_approved), r.ready_at) for r in rows]


_WRITE_PIN = (
    "UPDATE jobs SET pinned_barrier = :p_barrier, pinned_after = :p_after, pinned_at = :p_now, "
    "  pinned_snapshots = :p_snapshots, pinned_previous = :p_previous, "
    "  pin_invalidated_reason = NULL, updated_at = :p_now "
    "WHERE name = :p_name")

# A new progress record, or one more attempt (the barrier was handed out before in this run
# and aborted).
_RECORD_PROGRESS = (
    "INSERT INTO job_progress (job_name, run, barrier, state, started_at, attempts, snapshots, "
    "  previous, sources_ready_at) "
    "VALUES (:job, :run, :barrier, 'in_progress', :now, 1, :snapshots, :previous, :ready_at) "
    "ON CONFLICT (job_name, run, barrier) DO UPDATE SET state = 'in_progress', "
    "  attempts = job_progress.attempts + 1, snapshots = excluded.snapshots, "
    "  previous = excluded.previous")


_HAND_OUT_TYPES = {"p_snapshots": JSON, "p_previous": JSON, "snapshots": JSON, "previous": JSON,
                   "p_barrier": BigInteger, "p_after": BigInteger, "p_now": BigInteger,
                   "barrier": BigInteger, "now": BigInteger, "ready_at": BigInteger}


def _hand_out_statement(sql: str) -> DriverStatement[Any]:
    """``sql`` with its parameters typed (JSON serialised, a NULL barrier typed)."""
    names = set(re.findall(r":(\w+)", sql))
    return DriverStatement(text(sql).bindparams(*(
        bindparam(name, type_=type_) for name, type_ in _HAND_OUT_TYPES.items()
        if name in names)))


# PostgreSQL runs both in one statement (the UPDATE in a WITH); SQLite, which has no
# data-modifying WITH, one after the other.
_HAND_OUT_POSTGRES = _hand_out_statement(f"WITH pin AS ({_WRITE_PIN}) {_RECORD_PROGRESS}")
_HAND_OUT_SQLITE = (_hand_out_statement(_WRITE_PIN), _hand_out_statement(_RECORD_PROGRESS))


def record_hand_out(session: Session, job: str, run: int, barrier: int, *, after: int | None,
                    now_ms: int, snapshots: dict[str, Any], previous: dict[str, Any],
                    ready_at: int | None) -> None:
    """Pin ``barrier`` (after ``after``) on the row of ``job`` (held locked), with the
    snapshots handed out at both, and record it in the job's progress (in ``run``)."""
    pin = {"p_name": job, "p_barrier": barrier, "p_after": after, "p_now": now_ms,
           "p_snapshots": snapshots, "p_previous": previous}
    progress = {"job": job, "run": run, "barrier": barrier, "now": now_ms,
                "snapshots": snapshots, "previous": previous, "ready_at": ready_at}
    if on_postgres(session):
        _HAND_OUT_POSTGRES.execute(session, pin | progress)
    else:
        write_pin, record_progress = _HAND_OUT_SQLITE
        write_pin.execute(session, pin)
        record_progress.execute(session, progress)
