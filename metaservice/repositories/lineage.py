"""All SQL of lineage's OpenLineage outbox: writing events, claiming, delivering, standing.

A sender claims *jobs*, not events (``lineage_outbox_jobs``, with ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL; SQLite's write transactions are serial), until ``claimed_until``, and delivers the
claimed jobs' oldest events in order: a job's events go out in the order written whatever the
number of senders, a crashed sender's jobs are claimed again once its claim lapses, and
finding work reads the few job rows and the ``(job, id)`` index, however many events wait.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import bindparam, delete, exists, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from metaservice.db.engine import on_postgres
from metaservice.db.models import IcebergTableRow, LineageOutboxJobRow, LineageOutboxRow
from metaservice.names import TableName, qualified

# Written on the commit path: plain Core statements built once (as repositories/barriers.py's).
_ADD_EVENT = insert(LineageOutboxRow.__table__)
_ADD_JOB = {
    "postgresql": postgresql.insert(LineageOutboxJobRow.__table__).on_conflict_do_nothing(),
    "sqlite": sqlite.insert(LineageOutboxJobRow.__table__).on_conflict_do_nothing(),
}
_LOCATIONS = (
    select(IcebergTableRow.namespace, IcebergTableRow.name, IcebergTableRow.location)
    .where(IcebergTableRow.namespace.in_(bindparam("namespaces", expanding=True)),
           IcebergTableRow.name.in_(bindparam("names", expanding=True)),
           IcebergTableRow.location.is_not(None)))


def add_event(session: Session, *, job: str, event_type: str, barrier: int, payload: str,
              now_ms: int) -> None:
    dialect = "postgresql" if on_postgres(session) else "sqlite"
    session.execute(_ADD_JOB[dialect], {"job": job, "attempts": 0, "next_attempt_at": 0})
    session.execute(_ADD_EVENT, {"job": job, "event_type": event_type, "barrier": barrier,
                                 "payload": payload, "created_at": now_ms})


def catalog_locations(session: Session, tables: Collection[str], catalog: str) -> dict[str, str]:
    """The location of each of ``tables`` that the built-in catalog (named ``catalog``) holds."""
    wanted = {(n.database, n.table) for n in map(TableName.parse, tables) if n.catalog == catalog}
    if not wanted:
        return {}
    rows = session.execute(_LOCATIONS, {"namespaces": sorted({d for d, _ in wanted}),
                                        "names": sorted({t for _, t in wanted})})
    return {qualified(catalog, r.namespace, r.name): r.location for r in rows
            if (r.namespace, r.name) in wanted}


@dataclass(frozen=True)
class ClaimedEvent:
    id: int
    job: str
    payload: str
    attempts: int  # of the job's deliveries that failed in a row


def claim(session: Session, *, sender: str, now_ms: int, claim_ms: int, jobs: int,
          per_job: int) -> list[ClaimedEvent]:
    """Claim up to ``jobs`` jobs with events, due and not claimed by a live claim, and return
    the oldest ``per_job`` events of each, in delivery order (by job, then id)."""
    j = LineageOutboxJobRow
    due = (select(j.job, j.attempts)
           .where(j.next_attempt_at <= now_ms,
                  or_(j.claimed_until.is_(None), j.claimed_until < now_ms),
                  exists().where(LineageOutboxRow.job == j.job))
           .order_by(j.next_attempt_at, j.job).limit(jobs))
    if on_postgres(session):
        # NO KEY UPDATE: the foreign-key check of an event being written does not wait for it.
        due = due.with_for_update(skip_locked=True, key_share=True, of=j)
    claimed_jobs = session.execute(due).all()
    if not claimed_jobs:
        return []
    session.execute(update(j).where(j.job.in_([c.job for c in claimed_jobs]))
                    .values(claimed_until=now_ms + claim_ms, claimed_by=sender))
    claimed: list[ClaimedEvent] = []
    for job, attempts in claimed_jobs:
        rows = session.execute(
            select(LineageOutboxRow.id, LineageOutboxRow.payload)
            .where(LineageOutboxRow.job == job)
            .order_by(LineageOutboxRow.id).limit(per_job)).all()
        claimed.extend(ClaimedEvent(r.id, job, r.payload, attempts) for r in rows)
    return claimed


def delete_delivered(session: Session, ids: Sequence[int]) -> None:
    if ids:
        session.execute(delete(LineageOutboxRow).where(LineageOutboxRow.id.in_(list(ids))))


def release(session: Session, jobs: Collection[str], sender: str) -> None:
    """The jobs whose events were all delivered (or given back): claims end, failures reset."""
    if jobs:
        session.execute(update(LineageOutboxJobRow)
                        .where(LineageOutboxJobRow.job.in_(list(jobs)),
                               LineageOutboxJobRow.claimed_by == sender)
                        .values(claimed_until=None, claimed_by=None, attempts=0,
                                last_error=None))


def record_failure(session: Session, job: str, sender: str, *, error: str,
                   retry_at_ms: int) -> None:
    """The job's next event could not be delivered: the job waits until ``retry_at_ms``."""
    session.execute(update(LineageOutboxJobRow)
                    .where(LineageOutboxJobRow.job == job)
                    .values(attempts=LineageOutboxJobRow.attempts + 1, last_error=error[:500],
                            next_attempt_at=retry_at_ms, claimed_until=None, claimed_by=None))


@dataclass(frozen=True)
class JobStanding:
    job: str
    pending: int
    head_event_type: str
    head_barrier: int
    head_created_at: int
    attempts: int
    next_attempt_at: int
    last_error: str | None


@dataclass(frozen=True)
class Standing:
    """Where the outbox stands: events waiting, jobs whose last delivery failed, the oldest
    event's time."""

    pending: int
    failing_jobs: int
    oldest_created_at: int | None


def standing(session: Session) -> Standing:
    pending = session.scalar(select(func.count()).select_from(LineageOutboxRow)) or 0
    failing = session.scalar(select(func.count()).select_from(LineageOutboxJobRow)
                             .where(LineageOutboxJobRow.attempts > 0)) or 0
    oldest = session.scalar(select(LineageOutboxRow.created_at)
                            .order_by(LineageOutboxRow.id).limit(1))
    return Standing(pending, failing, oldest)


def job_standings(session: Session, limit: int) -> list[JobStanding]:
    """Per job with events waiting: how many, its next event, its delivery state; the jobs
    waiting longest first."""
    counts = (select(LineageOutboxRow.job, func.count().label("pending"),
                     func.min(LineageOutboxRow.id).label("head"))
              .group_by(LineageOutboxRow.job).subquery())
    rows = session.execute(
        select(counts.c.job, counts.c.pending, LineageOutboxRow.event_type,
               LineageOutboxRow.barrier, LineageOutboxRow.created_at,
               LineageOutboxJobRow.attempts, LineageOutboxJobRow.next_attempt_at,
               LineageOutboxJobRow.last_error)
        .join(LineageOutboxRow, LineageOutboxRow.id == counts.c.head)
        .join(LineageOutboxJobRow, LineageOutboxJobRow.job == counts.c.job)
        .order_by(counts.c.head).limit(limit))
    return [JobStanding(*r) for r in rows]
