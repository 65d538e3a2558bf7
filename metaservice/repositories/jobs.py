"""All SQL about jobs and their registered edges."""

from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from metaservice.db import locks
from metaservice.db.engine import dialect_insert
from metaservice.db.models import JobRow, JobTableRow, TableRow
from metaservice.names import TableName


def get_job(session: Session, name: str, *, for_update: bool = False) -> JobRow | None:
    if for_update:
        return locks.lock_job(session, name)
    return session.scalars(select(JobRow).where(JobRow.name == name)).first()


def create_planned_job(session: Session, name: str, now_ms: int, owner: str | None) -> None:
    """Insert a planned job unless one exists (two registrations racing both succeed)."""
    insert = dialect_insert(session)
    session.execute(
        insert(JobRow).values(name=name, state="planned", run=0, owner=owner,
                              registered_at=now_ms, updated_at=now_ms)
        .on_conflict_do_nothing(index_elements=["name"])
    )


def list_jobs(session: Session, *, state: str | None, planned_since_ms: int) -> list[JobRow]:
    stmt = select(JobRow).order_by(JobRow.name)
    if state is not None:
        stmt = stmt.where(JobRow.state == state)
    stmt = stmt.where((JobRow.state != "planned") | (JobRow.run > 0)
                      | (JobRow.updated_at >= planned_since_ms))
    return list(session.scalars(stmt))


def edges_of(session: Session, names: list[str]) -> dict[str, dict[str, list[TableName]]]:
    """``{job: {"source": [...], "sink": [...]}}`` for the given jobs."""
    result: dict[str, dict[str, list[TableName]]] = {n: {"source": [], "sink": []} for n in names}
    if not names:
        return result
    rows = session.execute(
        select(JobTableRow.job_name, JobTableRow.role, TableRow.catalog, TableRow.database,
               TableRow.name)
        .join(TableRow, TableRow.id == JobTableRow.table_id)
        .where(JobTableRow.job_name.in_(names))
        .order_by(TableRow.catalog, TableRow.database, TableRow.name)
    ).all()
    for job, role, catalog, database, table in rows:
        result[job][role].append(TableName(catalog, database, table))
    return result


def edge_rows(session: Session, name: str) -> list[tuple[str, TableRow]]:
    rows = session.execute(
        select(JobTableRow.role, TableRow)
        .join(TableRow, TableRow.id == JobTableRow.table_id)
        .where(JobTableRow.job_name == name)
        .order_by(TableRow.id)
    ).all()
    return [(role, table) for role, table in rows]


def add_edge(session: Session, job: str, table_id: int, role: str) -> bool:
    if session.get(JobTableRow, (job, table_id, role)) is not None:
        return False
    session.add(JobTableRow(job_name=job, table_id=table_id, role=role))
    session.flush()
    return True


def clear_edges(session: Session, job: str) -> None:
    session.execute(delete(JobTableRow).where(JobTableRow.job_name == job))


def purge_expired_planned(session: Session, older_than_ms: int) -> int:
    """Forget planned jobs never started whose last registration is older than the TTL. A job
    with history (planned again after a run) is marked terminated instead, keeping its history."""
    session.execute(
        update(JobRow).where(JobRow.state == "planned", JobRow.updated_at < older_than_ms,
                             JobRow.run > 0)
        .values(state="terminated", terminated_at=older_than_ms)
        .execution_options(synchronize_session=False)
    )
    names = list(session.scalars(
        select(JobRow.name).where(JobRow.state == "planned", JobRow.updated_at < older_than_ms,
                                  JobRow.run == 0)
    ))
    if names:
        session.execute(delete(JobTableRow).where(JobTableRow.job_name.in_(names)))
        session.execute(delete(JobRow).where(JobRow.name.in_(names)))
    return len(names)


def pinned_barriers(session: Session, names: list[str]) -> dict[str, int]:
    """The barrier each of the named running jobs holds (jobs holding none are absent)."""
    if not names:
        return {}
    rows = session.execute(select(JobRow.name, JobRow.pinned_barrier)
                           .where(JobRow.name.in_(names), JobRow.pinned_barrier.is_not(None),
                                  JobRow.pin_invalidated_reason.is_(None)))
    return {name: int(barrier) for name, barrier in rows}
