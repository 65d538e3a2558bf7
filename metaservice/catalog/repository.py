"""All SQL of the catalog: namespace rows, table pointers, the read sessions of its views and
the cut files they serve.

A pointer swap is a compare-and-swap on ``version`` (``UPDATE … WHERE version = :expected``;
zero rows means another commit won). On PostgreSQL the losing UPDATE waits for the winner's row
lock and then finds the new version; on SQLite write transactions are serialised.
"""

from __future__ import annotations

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

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
                   now_ms: int) -> bool:
    """Create the pointer at version 1; False when the table exists (race-safe)."""
    stmt = _insert(session)(IcebergTableRow).values(
        namespace=namespace, name=name, metadata_location=metadata_location, version=1,
        created_at=now_ms, updated_at=now_ms,
    ).on_conflict_do_nothing(index_elements=["namespace", "name"]).returning(
        IcebergTableRow.version)
    return session.execute(stmt).first() is not None


def swap_pointer(session: Session, namespace: str, name: str, *, expected_version: int,
                 metadata_location: str, now_ms: int) -> bool:
    """Compare-and-swap: point at ``metadata_location`` if the version is still the one read."""
    result = session.execute(
        update(IcebergTableRow)
        .where(IcebergTableRow.namespace == namespace, IcebergTableRow.name == name,
               IcebergTableRow.version == expected_version)
        .values(metadata_location=metadata_location, version=expected_version + 1,
                updated_at=now_ms)
        .returning(IcebergTableRow.version))
    return result.first() is not None


def delete_pointer(session: Session, namespace: str, name: str) -> str | None:
    """Delete the pointer; the metadata location it had, or None if there was none."""
    row = session.scalars(select(IcebergTableRow).where(
        IcebergTableRow.namespace == namespace, IcebergTableRow.name == name)
        .with_for_update()).first()
    if row is None:
        return None
    location = row.metadata_location
    session.delete(row)
    session.flush()
    return location


def rename_pointer(session: Session, source: tuple[str, str], target: tuple[str, str],
                   now_ms: int) -> bool:
    result = session.execute(
        update(IcebergTableRow)
        .where(IcebergTableRow.namespace == source[0], IcebergTableRow.name == source[1])
        .values(namespace=target[0], name=target[1], updated_at=now_ms)
        .returning(IcebergTableRow.version))
    return result.first() is not None


# -- MetaService's table rows ---------------------------------------------------------------


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


def record_cut_file(session: Session, location: str, table_uuid: str, snapshot_id: int,
                    now_ms: int) -> None:
    """Record a served cut file unless it is recorded (race-safe). A read first: loads of a
    recorded file, nearly all of them, write nothing."""
    if session.get(CutFileRow, location) is not None:
        return
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
