"""All SQL of lineage's OpenLineage outbox: writing events, claiming, delivering, standing.

Claims keep each job's events in order across any number of senders: only a job's oldest
event (its head) is claimed first, with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL (SQLite's
write transactions are serial), and the job's next events with it; the rows stay claimed
until ``claimed_until``, so the head of a job another sender is delivering is never a head
here, and a crashed sender's events are claimed again once its claim lapses.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import and_, delete, exists, func, or_, select, update
from sqlalchemy.orm import Session, aliased

from metaservice.db.engine import on_postgres
from metaservice.db.models import IcebergTableRow, LineageOutboxRow
from metaservice.names import TableName


def add_event(session: Session, *, job: str, event_type: str, barrier: int, payload: str,
              now_ms: int) -> None:
    session.add(LineageOutboxRow(job=job, event_type=event_type, barrier=barrier,
                                 payload=payload, created_at=now_ms, attempts=0,
                                 next_attempt_at=0))  # due now, whatever the senders' clocks


def catalog_locations(session: Session, tables: Collection[str], catalog: str) -> dict[str, str]:
    """The location of each of ``tables`` that the built-in catalog (named ``catalog``) holds."""
    names = [TableName.parse(t) for t in tables]
    wanted = [(n.database, n.table) for n in names if n.catalog == catalog]
    if not wanted:
        return {}
    rows = session.execute(
        select(IcebergTableRow.namespace, IcebergTableRow.name, IcebergTableRow.location)
        .where(IcebergTableRow.location.is_not(None),
               or_(*(and_(IcebergTableRow.namespace == d, IcebergTableRow.name == t)
                     for d, t in wanted))))
    return {f"{catalog}.{r.namespace}.{r.name}": r.location for r in rows}


@dataclass(frozen=True)
class ClaimedEvent:
    id: int
    job: str
    payload: str
    attempts: int


def claim(session: Session, *, sender: str, now_ms: int, claim_ms: int, jobs: int,
          per_job: int) -> list[ClaimedEvent]:
    """Claim the oldest events of up to ``jobs`` jobs (at most ``per_job`` each) whose head is
    due and not claimed by a live claim; returns them in delivery order (by job, then id)."""
    o = aliased(LineageOutboxRow)
    earlier = aliased(LineageOutboxRow)
    free = or_(o.claimed_until.is_(None), o.claimed_until < now_ms)
    heads = (select(o.id, o.job)
             .where(o.next_attempt_at <= now_ms, free,
                    ~exists().where(earlier.job == o.job, earlier.id < o.id))
             .order_by(o.id).limit(jobs))
    if on_postgres(session):
        heads = heads.with_for_update(skip_locked=True, of=o)
    head_rows = session.execute(heads).all()
    if not head_rows:
        return []
    claimed: list[ClaimedEvent] = []
    for head_id, job in head_rows:
        # The head is ours (locked, or the write lock on SQLite): no other sender is claiming
        # this job's events now.
        rows = session.execute(
            select(LineageOutboxRow.id, LineageOutboxRow.job, LineageOutboxRow.payload,
                   LineageOutboxRow.attempts)
            .where(LineageOutboxRow.job == job, LineageOutboxRow.id >= head_id)
            .order_by(LineageOutboxRow.id).limit(per_job)).all()
        claimed.extend(ClaimedEvent(r.id, r.job, r.payload, r.attempts) for r in rows)
    session.execute(update(LineageOutboxRow)
                    .where(LineageOutboxRow.id.in_([c.id for c in claimed]))
                    .values(claimed_until=now_ms + claim_ms, claimed_by=sender))
    return claimed


def delete_delivered(session: Session, ids: Sequence[int]) -> None:
    if ids:
        session.execute(delete(LineageOutboxRow).where(LineageOutboxRow.id.in_(list(ids))))


def release(session: Session, ids: Sequence[int], sender: str) -> None:
    """Give back claims not used (events after a job's failed one)."""
    if ids:
        session.execute(update(LineageOutboxRow)
                        .where(LineageOutboxRow.id.in_(list(ids)),
                               LineageOutboxRow.claimed_by == sender)
                        .values(claimed_until=None, claimed_by=None))


def record_failure(session: Session, event_id: int, sender: str, *, error: str,
                   retry_at_ms: int) -> None:
    session.execute(update(LineageOutboxRow)
                    .where(LineageOutboxRow.id == event_id)
                    .values(attempts=LineageOutboxRow.attempts + 1, last_error=error[:500],
                            next_attempt_at=retry_at_ms, claimed_until=None, claimed_by=None))


@dataclass(frozen=True)
class JobStanding:
    job: str
    pending: int
    head_event_type: str
    head_barrier: int
    head_created_at: int
    head_attempts: int
    head_next_attempt_at: int
    head_last_error: str | None


@dataclass(frozen=True)
class Standing:
    """Where the outbox stands: events waiting, those whose last delivery failed, the oldest."""

    pending: int
    failing: int
    oldest_created_at: int | None


def standing(session: Session) -> Standing:
    row = session.execute(select(
        func.count(), func.count().filter(LineageOutboxRow.attempts > 0),
        func.min(LineageOutboxRow.created_at))).one()
    return Standing(row[0] or 0, row[1] or 0, row[2])


def job_standings(session: Session, limit: int) -> list[JobStanding]:
    """Per job with events waiting: how many, and its head (the next to deliver); the jobs
    waiting longest first."""
    counts = (select(LineageOutboxRow.job, func.count().label("pending"),
                     func.min(LineageOutboxRow.id).label("head"))
              .group_by(LineageOutboxRow.job).subquery())
    rows = session.execute(
        select(counts.c.job, counts.c.pending, LineageOutboxRow.event_type,
               LineageOutboxRow.barrier, LineageOutboxRow.created_at, LineageOutboxRow.attempts,
               LineageOutboxRow.next_attempt_at, LineageOutboxRow.last_error)
        .join(LineageOutboxRow, LineageOutboxRow.id == counts.c.head)
        .order_by(counts.c.head).limit(limit))
    return [JobStanding(*r) for r in rows]
