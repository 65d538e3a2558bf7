"""The SQL of the catalog's scan plans (docs/contract.md#scan-planning): a plan (a lease, same
id), its plan tasks, and the count of a principal's live plans."""

from __future__ import annotations

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from metaservice.db.engine import on_postgres
from metaservice.db.models import LeaseRow, ScanPlanRow, ScanPlanTaskRow

_SCAN_PLANS_LOCK = 0x4D5350  # "MSP"


def lock_scan_plans_of(session: Session, principal: str | None) -> None:
    """Serialise the planning of one principal's scans (their count is capped); SQLite
    serialises every write already."""
    if on_postgres(session):
        session.execute(text("SELECT pg_advisory_xact_lock(:a, hashtext(:p))"),
                        {"a": _SCAN_PLANS_LOCK, "p": principal or ""})


def count_live_scan_plans(session: Session, principal: str | None, now_ms: int) -> int:
    return session.scalar(
        select(func.count()).select_from(ScanPlanRow)
        .join(LeaseRow, LeaseRow.id == ScanPlanRow.id)
        .where(LeaseRow.principal.is_(None) if principal is None
               else LeaseRow.principal == principal,
               LeaseRow.expires_at > now_ms)) or 0


def insert_scan_plan(session: Session, row: ScanPlanRow, batches: list[str]) -> None:
    session.add(row)
    session.flush()
    session.add_all(ScanPlanTaskRow(plan_id=row.id, seq=seq, content=content)
                    for seq, content in enumerate(batches))
    session.flush()


def get_scan_plan(session: Session, plan_id: str) -> tuple[ScanPlanRow, LeaseRow] | None:
    """The plan and its lease (None: no such plan, or cancelled, or forgotten)."""
    row = session.execute(select(ScanPlanRow, LeaseRow)
                          .join(LeaseRow, LeaseRow.id == ScanPlanRow.id)
                          .where(ScanPlanRow.id == plan_id)).first()
    return None if row is None else (row[0], row[1])


def plan_task(session: Session, plan_id: str, seq: int) -> str | None:
    """A plan task's answer, as stored."""
    return session.scalar(select(ScanPlanTaskRow.content).where(
        ScanPlanTaskRow.plan_id == plan_id, ScanPlanTaskRow.seq == seq))
