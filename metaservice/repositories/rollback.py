"""All SQL about rollback plans, their fences, and the rows a rollback changes."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from metaservice.db import locks
from metaservice.db.models import (
    BarrierRow,
    JobProgressRow,
    JobRow,
    RollbackFenceRow,
    RollbackPlanRow,
    SnapshotExpirationRow,
    TableRow,
)

INVALID_BARRIERS_LISTED = 1000


def invalid_barriers(session: Session, table_id: int, barrier: int) -> tuple[list[int], int]:
    """The barriers of a table above ``barrier`` and not rolled back: the first
    ``INVALID_BARRIERS_LISTED`` in order, and how many there are."""
    where = (BarrierRow.table_id == table_id, BarrierRow.barrier > barrier,
             BarrierRow.rolled_back.is_(False))
    listed = list(session.scalars(select(BarrierRow.barrier).where(*where)
                                  .order_by(BarrierRow.barrier).limit(INVALID_BARRIERS_LISTED)))
    if len(listed) < INVALID_BARRIERS_LISTED:
        return listed, len(listed)
    return listed, session.scalar(select(func.count()).select_from(BarrierRow).where(*where)) or 0


def expirations_of(
    session: Session, snapshots: Iterable[tuple[int, int]]
) -> dict[tuple[int, int], SnapshotExpirationRow]:
    """Approved or completed expirations of ``(table_id, snapshot_id)`` pairs."""
    wanted = set(snapshots)
    if not wanted:
        return {}
    table_ids = {t for t, _ in wanted}
    rows = session.scalars(select(SnapshotExpirationRow).where(
        SnapshotExpirationRow.table_id.in_(table_ids),
        SnapshotExpirationRow.snapshot_id.in_({s for _, s in wanted})))
    return {(r.table_id, r.snapshot_id): r for r in rows if (r.table_id, r.snapshot_id) in wanted}


def roll_back_barriers(session: Session, table_id: int, barrier: int) -> int:
    result = session.execute(
        update(BarrierRow)
        .where(BarrierRow.table_id == table_id, BarrierRow.barrier > barrier,
               BarrierRow.rolled_back.is_(False))
        .values(rolled_back=True)
        .execution_options(synchronize_session=False))
    return result.rowcount or 0


def reset_latest(session: Session, table: TableRow, row: BarrierRow | None) -> None:
    """``latest(T)`` goes back to ``row`` (the greatest barrier left), or to nothing."""
    table.latest_barrier = row.barrier if row else None
    table.latest_snapshot_id = row.snapshot_id if row else None
    table.latest_committed_at = row.committed_at if row else None


def invalidate_progress(session: Session, job: str, run: int, barrier: int) -> int:
    result = session.execute(
        update(JobProgressRow)
        .where(JobProgressRow.job_name == job, JobProgressRow.run == run,
               JobProgressRow.barrier > barrier,
               JobProgressRow.state.in_(("committed", "in_progress")))
        .values(state="invalidated", last_abort_reason="rolled back")
        .execution_options(synchronize_session=False))
    return result.rowcount or 0


# -- plans and fences ------------------------------------------------------------------------


def get_plan(session: Session, plan_id: str, *, for_update: bool = False) -> RollbackPlanRow | None:
    stmt = select(RollbackPlanRow).where(RollbackPlanRow.id == plan_id)
    if for_update:
        stmt = stmt.with_for_update().execution_options(populate_existing=True)
    return session.scalars(stmt).first()


def list_plans(session: Session, *, limit: int) -> list[RollbackPlanRow]:
    return list(session.scalars(select(RollbackPlanRow)
                                .order_by(RollbackPlanRow.created_at.desc()).limit(limit)))


def fences_on(session: Session, table_ids: Iterable[int]) -> dict[int, str]:
    """``{table_id: plan_id}`` for the given tables that are fenced."""
    ids = list(set(table_ids))
    if not ids:
        return {}
    rows = session.execute(select(RollbackFenceRow.table_id, RollbackFenceRow.plan_id)
                           .where(RollbackFenceRow.table_id.in_(ids))).all()
    return {t: p for t, p in rows}


def fence_target(session: Session, table_id: int, table: str) -> int | None:
    """The snapshot the rollback plan that fences table ``table_id`` (named ``table``) targets
    it at, or None: no plan fences it, or the plan has no target for it."""
    plan_id = fences_on(session, [table_id]).get(table_id)
    plan = get_plan(session, plan_id) if plan_id is not None else None
    if plan is None:
        return None
    for entry in plan.document.get("tables", []):  # the plan as stored (rollback/schemas.py)
        target = entry.get("target")
        if entry.get("table") == table and target is not None:
            return int(target["snapshot_id"])
    return None


def add_fences(session: Session, plan_id: str, table_ids: Iterable[int]) -> None:
    session.add_all(RollbackFenceRow(table_id=t, plan_id=plan_id) for t in sorted(set(table_ids)))
    session.flush()


def lift_fences(session: Session, plan_id: str) -> None:
    session.execute(delete(RollbackFenceRow).where(RollbackFenceRow.plan_id == plan_id))


def running_jobs(session: Session, names: Iterable[str], *,
                 for_update: bool = False) -> list[JobRow]:
    """The running jobs among ``names``, by name (the lock order among jobs)."""
    if for_update:
        return locks.lock_jobs(session, names, running_only=True)
    return list(session.scalars(
        select(JobRow).where(JobRow.name.in_(sorted(set(names))), JobRow.state == "running")
        .order_by(JobRow.name)))
