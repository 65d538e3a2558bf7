"""All SQL about completed barriers and job progress. Every lookup is an indexed seek on
``(table_id, barrier)``: an answer never scans barrier history."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

from sqlalchemy import Select, bindparam, func, select, union_all, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

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


# SQLite refuses compound SELECTs of more than 500 members (SQLITE_MAX_COMPOUND_SELECT).
_SNAPS_PER_STATEMENT = 256


@cache
def _snaps_statement(size: int) -> Select[tuple[BarrierRow]]:
    """``size`` snap seeks as one UNION ALL, built once per size: building and hashing the
    expression on every request cost ten times more CPU than running it."""
    seeks = [
        select(BarrierRow)
        .where(BarrierRow.table_id == bindparam(f"t{i}"), BarrierRow.barrier <= bindparam(f"b{i}"),
               BarrierRow.rolled_back.is_(False))
        .order_by(BarrierRow.barrier.desc())
        .limit(1)
        .subquery()
        .select()
        for i in range(size)
    ]
    return select(BarrierRow).from_statement(union_all(*seeks))


def snaps(session: Session, cuts: Mapping[int, int]) -> dict[int, BarrierRow]:
    """``snap(T, B)`` of many tables (``{table_id: B}``) in one round trip per 256 tables: the
    same indexed seeks as :func:`snap`, as one UNION ALL. Tables with no such row are absent."""
    found: dict[int, BarrierRow] = {}
    items = list(cuts.items())
    for start in range(0, len(items), _SNAPS_PER_STATEMENT):
        chunk = items[start:start + _SNAPS_PER_STATEMENT]
        size = 1 << (len(chunk) - 1).bit_length()  # powers of two: few cached statements
        chunk += [(-1, -1)] * (size - len(chunk))  # padding: seeks of a table that never exists
        params = {}
        for i, (table_id, barrier) in enumerate(chunk):
            params[f"t{i}"], params[f"b{i}"] = table_id, barrier
        found.update((row.table_id, row)
                     for row in session.scalars(_snaps_statement(size), params))
    return found


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
        # Already in the database: set as committed values, or the flush would write them again.
        set_committed_value(table, "latest_barrier", row.barrier)
        set_committed_value(table, "latest_snapshot_id", row.snapshot_id)
        set_committed_value(table, "latest_committed_at", row.committed_at)
        return True
    return False


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


def count_barriers(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(BarrierRow)) or 0
