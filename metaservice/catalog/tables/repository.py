"""The SQL of the catalog's tables: their pointers, the locations each table claims, MetaService's
table rows as the catalog changes them, and the cut files read sessions serve.

A pointer swap is a compare-and-swap on ``version`` (``UPDATE … WHERE version = :expected``;
zero rows means another commit won). On PostgreSQL the losing UPDATE waits for the winner's row
lock and then finds the new version; on SQLite write transactions are serialised.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import (
    Connection,
    String,
    bindparam,
    delete,
    func,
    literal,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session

from metaservice.catalog.views.repository import refuse_view_name
from metaservice.db.driver import DriverStatement
from metaservice.db.engine import dialect_insert, on_postgres
from metaservice.db.models import (
    BarrierRow,
    CatalogLocationRow,
    CatalogPurgeRow,
    CutFileRow,
    IcebergTableRow,
    JobRow,
    JobTableRow,
    TableRow,
)
from metaservice.names import TableName, dotted_namespace

# -- table pointers ----------------------------------------------------------------------------


def get_pointer(session: Session, namespace: str, name: str) -> IcebergTableRow | None:
    return session.scalars(select(IcebergTableRow).where(
        IcebergTableRow.namespace == namespace, IcebergTableRow.name == name)).first()


# The statements of every table load (``pointer_location``, and a read session's ``fixed_cut``,
# ``read_session_cuts`` and ``cut_file_recorded``) are built once, on the tables' columns rather
# than the mapped classes, so that they run without the ORM's per-statement work: a fifth to a
# third of the time of the same query written as the others are. The hot ones (a load of the
# head, a repeat load in a read session) run on a plain connection (``Database.reading``).
_POINTER_LOCATION = select(IcebergTableRow.__table__.c.metadata_location).where(
    IcebergTableRow.__table__.c.namespace == bindparam("namespace"),
    IcebergTableRow.__table__.c.name == bindparam("name"))


def pointer_location(session: Session | Connection, namespace: str, name: str) -> str | None:
    """The metadata file a table's pointer names; None when there is no such table."""
    return session.execute(_POINTER_LOCATION, {"namespace": namespace, "name": name}).scalar()


class Pointer(NamedTuple):
    """What a commit reads of a table's pointer before it stages the new metadata file: the
    file, and the version its compare-and-swap expects."""

    metadata_location: str
    version: int


_POINTER = select(IcebergTableRow.__table__.c.metadata_location,
                  IcebergTableRow.__table__.c.version).where(
    IcebergTableRow.__table__.c.namespace == bindparam("namespace"),
    IcebergTableRow.__table__.c.name == bindparam("name"))


def read_pointer(connection: Session | Connection, namespace: str, name: str) -> Pointer | None:
    """A table's pointer (one constant statement, no ORM object); None when there is none."""
    row = connection.execute(_POINTER, {"namespace": namespace, "name": name}).first()
    return None if row is None else Pointer(row[0], int(row[1]))


def list_tables(session: Session, namespace: str, after: str | None = None,
                limit: int | None = None) -> list[str]:
    """Table names of a namespace in order, after ``after``, at most ``limit``."""
    statement = (select(IcebergTableRow.name).where(IcebergTableRow.namespace == namespace)
                 .order_by(IcebergTableRow.name))
    if after is not None:
        statement = statement.where(IcebergTableRow.name > after)
    return list(session.scalars(statement.limit(limit)))


def insert_pointer(session: Session, namespace: str, name: str, metadata_location: str,
                   now_ms: int, *, table_uuid: str, location: str) -> bool:
    """Create the pointer at version 1; False when the table exists (race-safe). A name a
    view has is refused (409). ``location`` is the table location's key (``Warehouse.key``)."""
    refuse_view_name(session, namespace, name)
    stmt = dialect_insert(session)(IcebergTableRow).values(
        namespace=namespace, name=name, metadata_location=metadata_location, version=1,
        created_at=now_ms, updated_at=now_ms, table_uuid=table_uuid, location=location,
    ).on_conflict_do_nothing(index_elements=["namespace", "name"]).returning(
        IcebergTableRow.version)
    return session.execute(stmt).first() is not None


def swap_pointer(session: Session, namespace: str, name: str, *, expected_version: int,
                 metadata_location: str, now_ms: int, table_uuid: str | None = None,
                 location: str | None = None) -> bool:
    """Compare-and-swap: point at ``metadata_location`` if the version is still the one read
    (and record the table's identity and location key, when given)."""
    return bool(_SWAP.rows(session, {
        "namespace": namespace, "name": name, "expected_version": expected_version,
        "metadata_location": metadata_location, "now": now_ms, "table_uuid": table_uuid,
        "location": location}))


class _Swapped(NamedTuple):
    version: int


# One constant statement (an identity or location not given is kept), run on the driver.
_columns = IcebergTableRow.__table__.c
_SWAP = DriverStatement(
    update(IcebergTableRow.__table__)
    .where(_columns.namespace == bindparam("namespace"), _columns.name == bindparam("name"),
           _columns.version == bindparam("expected_version"))
    .values(metadata_location=bindparam("metadata_location"),
            version=_columns.version + 1, updated_at=bindparam("now"),
            table_uuid=func.coalesce(bindparam("table_uuid", type_=String), _columns.table_uuid),
            location=func.coalesce(bindparam("location", type_=String), _columns.location))
    .returning(_columns.version), _Swapped)


def delete_pointer(session: Session, namespace: str, name: str, *,
                   expected_version: int) -> IcebergTableRow | None:
    """Delete the pointer if its version is still the one read; the row it was, or None."""
    row = session.scalars(select(IcebergTableRow).where(
        IcebergTableRow.namespace == namespace, IcebergTableRow.name == name,
        IcebergTableRow.version == expected_version).with_for_update()).first()
    if row is None:
        return None
    session.delete(row)
    session.flush()
    return row


def lock_locations(session: Session) -> None:
    """Serialise the transactions that give a table a location or an identity (create,
    register, a location change), so that two racing ones cannot both find no overlap. SQLite
    serialises every writer already; PostgreSQL takes a transaction-scoped advisory lock."""
    if on_postgres(session):
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCATIONS_LOCK})


_LOCATIONS_LOCK = 0x4D53_4C4F_4301  # "MSLOC", 1


def claims_overlapping(session: Session, location: str,
                       table_uuid: str) -> list[tuple[str, str]]:
    """``(location, table)`` of every claim of another table that equals ``location``, lies
    inside it, or contains it."""
    column = CatalogLocationRow.location
    statement = (
        select(column, IcebergTableRow.namespace, IcebergTableRow.name)
        .outerjoin(IcebergTableRow, IcebergTableRow.table_uuid == CatalogLocationRow.table_uuid)
        .where(CatalogLocationRow.table_uuid != table_uuid,
               or_(column == location,
                   func.substr(column, 1, len(location) + 1) == location + "/",
                   func.substr(literal(location), 1, func.length(column) + 1) == column + "/")))
    return [(claim, f"{ns}.{name}" if ns is not None
             else "a dropped table being purged, or a view")
            for claim, ns, name in session.execute(statement)]


def table_claiming(session: Session, location: str) -> tuple[str, str] | None:
    """``(namespace, name)`` of the table (not a view) whose claim equals or contains
    ``location``: no two claims overlap, so at most one."""
    column = CatalogLocationRow.location
    row = session.execute(
        select(IcebergTableRow.namespace, IcebergTableRow.name)
        .select_from(CatalogLocationRow)
        .join(IcebergTableRow, IcebergTableRow.table_uuid == CatalogLocationRow.table_uuid)
        .where(or_(column == location,
                   func.substr(literal(location), 1, func.length(column) + 1) == column + "/"))
        .limit(1)).first()
    return None if row is None else (row[0], row[1])


def table_with_uuid(session: Session, table_uuid: str) -> str | None:
    row = session.execute(select(IcebergTableRow.namespace, IcebergTableRow.name).where(
        IcebergTableRow.table_uuid == table_uuid)).first()
    return None if row is None else f"{dotted_namespace(row[0], row[1])}"


def add_claims(session: Session, table_uuid: str, locations: list[str], now_ms: int) -> None:
    """Claim ``locations`` for the table (those it claims already are left as they are)."""
    for location in locations:
        session.execute(dialect_insert(session)(CatalogLocationRow).values(
            location=location, table_uuid=table_uuid, created_at=now_ms,
        ).on_conflict_do_nothing(index_elements=["location"]))


def release_claims(session: Session, table_uuid: str) -> list[str]:
    """Delete the table's claims; answers them (a purge deletes files under them only)."""
    return sorted(session.scalars(delete(CatalogLocationRow).where(
        CatalogLocationRow.table_uuid == table_uuid).returning(CatalogLocationRow.location)))


def claims_of(session: Session, table_uuid: str) -> list[str]:
    """The locations the table claims."""
    return sorted(session.scalars(select(CatalogLocationRow.location).where(
        CatalogLocationRow.table_uuid == table_uuid)))


# -- purges: recorded with the drop, until they finished ---------------------------------------


class PendingPurge(NamedTuple):
    table_uuid: str
    metadata_location: str
    claims: list[str]


def record_purge(session: Session, table_uuid: str, metadata_location: str, claims: list[str],
                 *, now_ms: int, claimed_by: str, claim_ms: int) -> None:
    """Record the purge of a dropped table, in the drop's transaction, taken by ``claimed_by``
    (the process answering the drop) until ``now_ms + claim_ms``. A purge of the same table
    still pending (a table registered again from its files and dropped again) is merged."""
    existing = session.get(CatalogPurgeRow, table_uuid, with_for_update=True)
    if existing is not None:
        existing.claims = sorted({*existing.claims, *claims})
        existing.metadata_location = metadata_location
        existing.claimed_until, existing.claimed_by = now_ms + claim_ms, claimed_by
        return
    session.add(CatalogPurgeRow(table_uuid=table_uuid, metadata_location=metadata_location,
                                claims=sorted(claims), created_at=now_ms,
                                claimed_until=now_ms + claim_ms, claimed_by=claimed_by))
    session.flush()


def purge_pending(session: Session, table_uuid: str) -> bool:
    return session.get(CatalogPurgeRow, table_uuid) is not None


def take_lapsed_purge(session: Session, *, worker: str, now_ms: int,
                      claim_ms: int) -> PendingPurge | None:
    """Take the oldest purge nobody holds (its claim lapsed): one process at a time. On
    PostgreSQL the row is locked ``FOR UPDATE SKIP LOCKED`` (another process taking one skips
    it) and the conditional UPDATE below re-checks the lapse; SQLite serialises writers."""
    due = (select(CatalogPurgeRow)
           .where(or_(CatalogPurgeRow.claimed_until.is_(None),
                      CatalogPurgeRow.claimed_until < now_ms))
           .order_by(CatalogPurgeRow.created_at, CatalogPurgeRow.table_uuid).limit(1))
    if on_postgres(session):
        due = due.with_for_update(skip_locked=True)
    row = session.scalars(due).first()
    if row is None:
        return None
    taken = session.execute(
        update(CatalogPurgeRow)
        .where(CatalogPurgeRow.table_uuid == row.table_uuid,
               or_(CatalogPurgeRow.claimed_until.is_(None),
                   CatalogPurgeRow.claimed_until < now_ms))
        .values(claimed_until=now_ms + claim_ms, claimed_by=worker)
        .returning(CatalogPurgeRow.table_uuid)).first()
    if taken is None:
        return None
    return PendingPurge(row.table_uuid, row.metadata_location, list(row.claims))


def extend_purge_claim(session: Session, table_uuid: str, *, worker: str,
                       until_ms: int) -> bool:
    """Extend the worker's claim; False when it holds the purge no more (its claim lapsed and
    another took it, or the purge is finished)."""
    return session.execute(
        update(CatalogPurgeRow)
        .where(CatalogPurgeRow.table_uuid == table_uuid, CatalogPurgeRow.claimed_by == worker)
        .values(claimed_until=until_ms)
        .returning(CatalogPurgeRow.table_uuid)).first() is not None


def release_purge(session: Session, table_uuid: str, *, worker: str) -> None:
    """Give the purge back (its worker is stopping): any process may take it now."""
    session.execute(
        update(CatalogPurgeRow)
        .where(CatalogPurgeRow.table_uuid == table_uuid, CatalogPurgeRow.claimed_by == worker)
        .values(claimed_until=None, claimed_by=None))


def finish_purge(session: Session, table_uuid: str, *, worker: str) -> bool:
    """Delete the purge's record and release the locations the table claimed (unless a table
    holds its uuid again); False when the worker holds the purge no more."""
    finished = session.execute(
        delete(CatalogPurgeRow)
        .where(CatalogPurgeRow.table_uuid == table_uuid, CatalogPurgeRow.claimed_by == worker)
        .returning(CatalogPurgeRow.table_uuid)).first() is not None
    if finished and table_with_uuid(session, table_uuid) is None:
        release_claims(session, table_uuid)
    return finished


def pointers_without_identity(session: Session) -> list[IcebergTableRow]:
    """Rows older than the table identity column (revision 0010)."""
    return list(session.scalars(select(IcebergTableRow).where(
        IcebergTableRow.table_uuid.is_(None))))


def set_identity(session: Session, namespace: str, name: str, *, version: int,
                 table_uuid: str, location: str) -> bool:
    return session.execute(update(IcebergTableRow).where(
        IcebergTableRow.namespace == namespace, IcebergTableRow.name == name,
        IcebergTableRow.version == version,
    ).values(table_uuid=table_uuid, location=location).returning(
        IcebergTableRow.version)).first() is not None


def rename_pointer(session: Session, source: tuple[str, str], target: tuple[str, str],
                   now_ms: int) -> bool:
    """Move the pointer to its new name. Its version moves too: a commit or a drop that read
    the table under one name never lands on another table that takes that name meanwhile."""
    refuse_view_name(session, *target, renaming=".".join(source))
    result = session.execute(
        update(IcebergTableRow)
        .where(IcebergTableRow.namespace == source[0], IcebergTableRow.name == source[1])
        .values(namespace=target[0], name=target[1], updated_at=now_ms,
                version=IcebergTableRow.version + 1)
        .returning(IcebergTableRow.version))
    return result.first() is not None


# -- MetaService's table rows ---------------------------------------------------------------


def delete_table_row(session: Session, table_id: int) -> None:
    """Forget a table: its barrier history, leases and read-session entries, expirations,
    rollback plans and registered edges go with it (their rows cascade)."""
    session.execute(delete(TableRow).where(TableRow.id == table_id))


def running_jobs_of(session: Session, table_id: int) -> list[str]:
    """Running jobs that read or write the table."""
    return list(session.scalars(
        select(JobTableRow.job_name).join(JobRow, JobRow.name == JobTableRow.job_name)
        .where(JobTableRow.table_id == table_id, JobRow.state == "running").distinct()))


def rename_table_row(session: Session, table_id: int, target: TableName) -> None:
    session.execute(update(TableRow).where(TableRow.id == table_id).values(
        catalog=target.catalog, database=target.database, name=target.table))


def take_over_barriers(session: Session, table_id: int, *, replaced: int,
                       replacement: int) -> int:
    """A compaction's snapshot takes over the barriers its parent completed
    (docs/contract.md#commits-through-the-catalog)."""
    moved = len(session.execute(update(BarrierRow).where(
        BarrierRow.table_id == table_id, BarrierRow.snapshot_id == replaced,
    ).values(snapshot_id=replacement).returning(BarrierRow.barrier)).all())
    session.execute(update(TableRow).where(
        TableRow.id == table_id, TableRow.latest_snapshot_id == replaced,
    ).values(latest_snapshot_id=replacement))
    return moved


# -- cut files of read sessions (docs/contract.md#a-table-at-a-cut) --------------------------------


_CUT_FILE_RECORDED = select(literal(1)).where(
    CutFileRow.__table__.c.location == bindparam("location"))


def cut_file_recorded(session: Session, location: str) -> bool:
    return session.execute(_CUT_FILE_RECORDED, {"location": location}).first() is not None


def record_cut_file(session: Session, location: str, table_uuid: str, snapshot_id: int,
                    now_ms: int) -> None:
    """Record a served cut file unless it is recorded (race-safe)."""
    session.execute(dialect_insert(session)(CutFileRow).values(
        location=location, table_uuid=table_uuid, snapshot_id=snapshot_id,
        created_at=now_ms,
    ).on_conflict_do_nothing(index_elements=["location"]))


def take_cut_files(session: Session, table_uuid: str,
                   snapshot_ids: list[int] | None = None) -> list[str]:
    """Delete the rows of the table's cut files (of ``snapshot_ids`` only, unless None);
    answers their locations."""
    statement = delete(CutFileRow).where(CutFileRow.table_uuid == table_uuid)
    if snapshot_ids is not None:
        statement = statement.where(CutFileRow.snapshot_id.in_(snapshot_ids))
    return sorted(session.scalars(statement.returning(CutFileRow.location)))
