"""All SQL of the delay answers. Each query is one indexed pass: tables by primary key,
progress records by ``ix_job_progress_finished_at``, barriers by ``ix_barriers_committed_at``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from metaservice.db.models import BarrierRow, JobProgressRow, TableRow


@dataclass(frozen=True)
class TableLatest:
    id: int
    name: str
    latest_barrier: int | None
    latest_committed_at: int | None


@dataclass(frozen=True)
class FinishedHop:
    job: str
    barrier: int
    sources_ready_at: int | None
    started_at: int
    finished_at: int
    attempts: int


def all_tables(session: Session) -> list[TableLatest]:
    rows = session.execute(select(TableRow.id, TableRow.catalog, TableRow.database, TableRow.name,
                                  TableRow.latest_barrier, TableRow.latest_committed_at)).all()
    return [TableLatest(i, f"{c}.{d}.{t}", b, at) for i, c, d, t, b, at in rows]


def tables_named(session: Session, names: Iterable[str]) -> list[TableLatest]:
    keys = [tuple(n.split(".")) for n in set(names)]
    if not keys:
        return []
    rows = session.execute(select(TableRow.id, TableRow.catalog, TableRow.database, TableRow.name,
                                  TableRow.latest_barrier, TableRow.latest_committed_at)
                           .where(tuple_(TableRow.catalog, TableRow.database, TableRow.name)
                                  .in_(keys))).all()
    return [TableLatest(i, f"{c}.{d}.{t}", b, at) for i, c, d, t, b, at in rows]


def finished_hops(session: Session, *, since_ms: int,
                  jobs: Iterable[str] | None = None) -> list[FinishedHop]:
    """Committed progress records finished at or after ``since_ms``."""
    stmt = (select(JobProgressRow.job_name, JobProgressRow.barrier, JobProgressRow.sources_ready_at,
                   JobProgressRow.started_at, JobProgressRow.finished_at, JobProgressRow.attempts)
            .where(JobProgressRow.finished_at >= since_ms, JobProgressRow.state == "committed"))
    if jobs is not None:
        stmt = stmt.where(JobProgressRow.job_name.in_(list(jobs)))
    return [FinishedHop(*row) for row in session.execute(stmt).all()]


def end_to_end_samples(session: Session, *, since_ms: int,
                       table_ids: Iterable[int] | None = None) -> list[tuple[int, int]]:
    """``(table_id, committed_at − barrier)`` of every barrier committed at or after
    ``since_ms`` and not rolled back."""
    stmt = (select(BarrierRow.table_id, BarrierRow.committed_at - BarrierRow.barrier)
            .where(BarrierRow.committed_at >= since_ms, BarrierRow.rolled_back.is_(False)))
    if table_ids is not None:
        stmt = stmt.where(BarrierRow.table_id.in_(list(table_ids)))
    return [(t, int(v)) for t, v in session.execute(stmt).all()]
