"""All SQL about completed barriers and job progress. Every lookup is an indexed seek on
``(table_id, barrier)``: an answer never scans barrier history."""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from metaservice.db.models import BarrierRow, JobProgressRow, TableRow


def snap(session: Session, table_id: int, barrier: int) -> BarrierRow | None:
    """``snap(T, B)``: the row completing the greatest barrier ≤ B that is not rolled back."""
    return session.scalars(
        select(BarrierRow)
        .where(BarrierRow.table_id == table_id, BarrierRow.barrier <= barrier,
               BarrierRow.rolled_back.is_(False))
        .order_by(BarrierRow.barrier.desc())
        .limit(1)
    ).first()


def first_at_or_after(session: Session, table_id: int, barrier: int) -> BarrierRow | None:
    return session.scalars(
        select(BarrierRow)
        .where(BarrierRow.table_id == table_id, BarrierRow.barrier >= barrier,
               BarrierRow.rolled_back.is_(False))
        .order_by(BarrierRow.barrier.asc())
        .limit(1)
    ).first()


def earliest(session: Session, table_id: int) -> BarrierRow | None:
    return session.scalars(
        select(BarrierRow)
        .where(BarrierRow.table_id == table_id, BarrierRow.rolled_back.is_(False))
        .order_by(BarrierRow.barrier.asc())
        .limit(1)
    ).first()


def get(session: Session, table_id: int, barrier: int) -> BarrierRow | None:
    return session.get(BarrierRow, (table_id, barrier))


def latest_with_snapshot(session: Session, table_id: int, snapshot_id: int) -> BarrierRow | None:
    return session.scalars(
        select(BarrierRow)
        .where(BarrierRow.table_id == table_id, BarrierRow.snapshot_id == snapshot_id,
               BarrierRow.rolled_back.is_(False))
        .order_by(BarrierRow.barrier.desc())
        .limit(1)
    ).first()


def history(session: Session, table_id: int, *, before: int | None, limit: int) -> list[BarrierRow]:
    stmt = select(BarrierRow).where(BarrierRow.table_id == table_id)
    if before is not None:
        stmt = stmt.where(BarrierRow.barrier < before)
    return list(session.scalars(stmt.order_by(BarrierRow.barrier.desc()).limit(limit)))


def advance_latest(session: Session, table: TableRow, row: BarrierRow) -> bool:
    """Compare-and-swap ``latest(T)`` forward; False when a newer barrier is already there."""
    result = session.execute(
        update(TableRow)
        .where(TableRow.id == table.id,
               (TableRow.latest_barrier.is_(None)) | (TableRow.latest_barrier < row.barrier))
        .values(latest_barrier=row.barrier, latest_snapshot_id=row.snapshot_id,
                latest_committed_at=row.committed_at)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount == 1:
        table.latest_barrier = row.barrier
        table.latest_snapshot_id = row.snapshot_id
        table.latest_committed_at = row.committed_at
        return True
    return False


def committed_sinks(session: Session, job: str, run: int, barrier: int) -> set[int]:
    return set(session.scalars(
        select(BarrierRow.table_id).where(BarrierRow.writer_job == job,
                                          BarrierRow.writer_run == run,
                                          BarrierRow.barrier == barrier,
                                          BarrierRow.rolled_back.is_(False))
    ))


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


def count_barriers(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(BarrierRow)) or 0
