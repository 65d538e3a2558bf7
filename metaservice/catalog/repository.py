"""All SQL of the catalog: namespace rows, table pointers, the read sessions of its views and
the cut files they serve.

A pointer swap is a compare-and-swap on ``version`` (``UPDATE … WHERE version = :expected``;
zero rows means another commit won). On PostgreSQL the losing UPDATE waits for the winner's row
lock and then finds the new version; on SQLite write transactions are serialised.
"""

from __future__ import annotations

from sqlalchemy import delete, func, literal, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from metaservice.catalog.sql_view_repository import refuse_view_name
from metaservice.db.engine import on_postgres
from metaservice.db.models import (
    BarrierRow,
    CutFileRow,
    IcebergNamespaceRow,
    IcebergTableRow,
    JobRow,
    JobTableRow,
    LeaseRow,
    ReadSessionCutRow,
    ReadSessionRow,
    TableRow,
)
from metaservice.names import TableName


def _insert(session: Session):  # type: ignore[no-untyped-def]
    return pg_insert if on_postgres(session) else sqlite_insert


# -- namespaces ------------------------------------------------------------------------------


def get_namespace(session: Session, name: str) -> IcebergNamespaceRow | None:
    return session.get(IcebergNamespaceRow, name)


def list_namespaces(session: Session) -> list[str]:
    return list(session.scalars(select(IcebergNamespaceRow.name)
                                .order_by(IcebergNamespaceRow.name)))


def create_namespace(session: Session, name: str, properties: dict[str, str],
                     now_ms: int) -> bool:
    """Insert the namespace; False when it exists (race-safe)."""
    stmt = _insert(session)(IcebergNamespaceRow).values(
        name=name, properties=properties, created_at=now_ms,
    ).on_conflict_do_nothing(index_elements=["name"]).returning(IcebergNamespaceRow.name)
    return session.execute(stmt).first() is not None


def set_namespace_properties(session: Session, name: str, properties: dict[str, str]) -> None:
    session.execute(update(IcebergNamespaceRow).where(IcebergNamespaceRow.name == name)
                    .values(properties=properties))


def drop_namespace(session: Session, name: str) -> bool:
    return session.execute(delete(IcebergNamespaceRow).where(IcebergNamespaceRow.name == name)
                           .returning(IcebergNamespaceRow.name)).first() is not None


def count_tables(session: Session, namespace: str) -> int:
    return session.scalar(select(func.count()).select_from(IcebergTableRow)
                          .where(IcebergTableRow.namespace == namespace)) or 0


# -- table pointers ----------------------------------------------------------------------------


def get_pointer(session: Session, namespace: str, name: str) -> IcebergTableRow | None:
    return session.scalars(select(IcebergTableRow).where(
        IcebergTableRow.namespace == namespace, IcebergTableRow.name == name)).first()


def list_tables(session: Session, namespace: str) -> list[str]:
    return list(session.scalars(select(IcebergTableRow.name)
                                .where(IcebergTableRow.namespace == namespace)
                                .order_by(IcebergTableRow.name)))


def insert_pointer(session: Session, namespace: str, name: str, metadata_location: str,
                   now_ms: int, *, table_uuid: str, location: str) -> bool:
    """Create the pointer at version 1; False when the table exists (race-safe). ``location``
    is the table location's key (``Warehouse.key``). A name a view has is refused (409)."""
    refuse_view_name(session, namespace, name)
    stmt = _insert(session)(IcebergTableRow).values(
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
    values: dict[str, object] = {"metadata_location": metadata_location,
                                 "version": expected_version + 1, "updated_at": now_ms}
    if table_uuid is not None:
        values["table_uuid"] = table_uuid
    if location is not None:
        values["location"] = location
    result = session.execute(
        update(IcebergTableRow)
        .where(IcebergTableRow.namespace == namespace, IcebergTableRow.name == name,
               IcebergTableRow.version == expected_version)
        .values(**values)
        .returning(IcebergTableRow.version))
    return result.first() is not None


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


def tables_overlapping(session: Session, location: str,
                       exclude: tuple[str, str] | None = None) -> list[str]:
    """``namespace.name`` of every table whose location key equals ``location``, lies inside
    it, or contains it."""
    column = IcebergTableRow.location
    statement = select(IcebergTableRow.namespace, IcebergTableRow.name).where(
        column.is_not(None),
        or_(column == location,
            func.substr(column, 1, len(location) + 1) == location + "/",
            func.substr(literal(location), 1, func.length(column) + 1) == column + "/"))
    if exclude is not None:
        statement = statement.where(
            ~((IcebergTableRow.namespace == exclude[0]) & (IcebergTableRow.name == exclude[1])))
    return [f"{ns}.{name}" for ns, name in session.execute(statement)]


def table_with_uuid(session: Session, table_uuid: str) -> str | None:
    row = session.execute(select(IcebergTableRow.namespace, IcebergTableRow.name).where(
        IcebergTableRow.table_uuid == table_uuid)).first()
    return None if row is None else f"{row[0]}.{row[1]}"


def pointers_without_identity(session: Session) -> list[IcebergTableRow]:
    """Rows older than the table identity columns (revision 0010)."""
    return list(session.scalars(select(IcebergTableRow).where(
        or_(IcebergTableRow.table_uuid.is_(None), IcebergTableRow.location.is_(None)))))


def set_identity(session: Session, namespace: str, name: str, *, version: int,
                 table_uuid: str, location: str) -> None:
    session.execute(update(IcebergTableRow).where(
        IcebergTableRow.namespace == namespace, IcebergTableRow.name == name,
        IcebergTableRow.version == version,
    ).values(table_uuid=table_uuid, location=location))


def rename_pointer(session: Session, source: tuple[str, str], target: tuple[str, str],
                   now_ms: int) -> bool:
    refuse_view_name(session, *target)
    result = session.execute(
        update(IcebergTableRow)
        .where(IcebergTableRow.namespace == source[0], IcebergTableRow.name == source[1])
        .values(namespace=target[0], name=target[1], updated_at=now_ms)
        .returning(IcebergTableRow.version))
    return result.first() is not None


# -- MetaService's table rows ---------------------------------------------------------------


def delete_table_row(session: Session, table_id: int) -> None:
    """Forget a table: its barrier history, leases and read-session entries, expirations,
    rollback plans and registered edges go with it (their rows cascade)."""
    session.execute(delete(TableRow).where(TableRow.id == table_id))


def count_live_read_sessions(session: Session, principal: str | None, now_ms: int) -> int:
    return session.scalar(
        select(func.count()).select_from(ReadSessionRow)
        .join(LeaseRow, LeaseRow.id == ReadSessionRow.id)
        .where(LeaseRow.principal.is_(None) if principal is None
               else LeaseRow.principal == principal,
               LeaseRow.expires_at > now_ms)) or 0


def lock_read_sessions_of(session: Session, principal: str | None) -> None:
    """Serialise the opening of one principal's read sessions (their count is capped)."""
    if on_postgres(session):
        session.execute(text("SELECT pg_advisory_xact_lock(:a, hashtext(:p))"),
                        {"a": _READ_SESSIONS_LOCK, "p": principal or ""})


_READ_SESSIONS_LOCK = 0x4D5352  # "MSR"


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
    """A compaction's snapshot takes over the barriers its parent completed (SPEC §11)."""
    moved = len(session.execute(update(BarrierRow).where(
        BarrierRow.table_id == table_id, BarrierRow.snapshot_id == replaced,
    ).values(snapshot_id=replacement).returning(BarrierRow.barrier)).all())
    session.execute(update(TableRow).where(
        TableRow.id == table_id, TableRow.latest_snapshot_id == replaced,
    ).values(latest_snapshot_id=replacement))
    return moved


# -- read sessions of views (SPEC §12) -----------------------------------------------------------


def insert_read_session(session: Session, session_id: str, view: str, barrier: int | None,
                        now_ms: int) -> None:
    session.add(ReadSessionRow(id=session_id, view=view, barrier=barrier, created_at=now_ms))
    session.flush()


def get_read_session(session: Session, session_id: str, *,
                     lock: bool) -> tuple[ReadSessionRow, LeaseRow] | None:
    """The read session and its lease; ``lock``: locked, so that a session's loads that fix a
    cut are serialised and two tables of one pipeline loaded at once still get one cut."""
    statement = (select(ReadSessionRow, LeaseRow)
                 .join(LeaseRow, LeaseRow.id == ReadSessionRow.id)
                 .where(ReadSessionRow.id == session_id))
    if lock:
        statement = statement.with_for_update().execution_options(populate_existing=True)
    row = session.execute(statement).first()
    return None if row is None else (row[0], row[1])


def read_session_cuts(session: Session, session_id: str) -> dict[str, tuple[int, int, int]]:
    """``{table name: (table_id, barrier, snapshot_id)}`` of the tables the session fixed."""
    rows = session.execute(
        select(TableRow.catalog, TableRow.database, TableRow.name, ReadSessionCutRow.table_id,
               ReadSessionCutRow.barrier, ReadSessionCutRow.snapshot_id)
        .join(TableRow, TableRow.id == ReadSessionCutRow.table_id)
        .where(ReadSessionCutRow.session_id == session_id)).tuples()
    return {f"{c}.{d}.{t}": (table_id, barrier, snapshot_id)
            for c, d, t, table_id, barrier, snapshot_id in rows}


def add_read_session_cut(session: Session, session_id: str, table_id: int, barrier: int,
                         snapshot_id: int) -> None:
    session.add(ReadSessionCutRow(session_id=session_id, table_id=table_id, barrier=barrier,
                                  snapshot_id=snapshot_id))
    session.flush()


# -- cut files of views (SPEC §12) ------------------------------------------------------------


def cut_file_recorded(session: Session, location: str) -> bool:
    return session.get(CutFileRow, location) is not None


def record_cut_file(session: Session, location: str, table_uuid: str, snapshot_id: int,
                    now_ms: int) -> None:
    """Record a served cut file unless it is recorded (race-safe)."""
    session.execute(_insert(session)(CutFileRow).values(
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
