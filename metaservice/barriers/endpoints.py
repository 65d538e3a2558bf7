"""HTTP only: the barrier protocol and per-table barrier history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Query
from sqlalchemy import select

from metaservice import errors
from metaservice.barriers import repository as barriers_repo
from metaservice.barriers import service
from metaservice.barriers.schemas import (
    AbortIn,
    AbortOut,
    BarrierOut,
    CommitIn,
    CompletedOut,
    JobProgressOut,
    NextIn,
    ProgressOut,
    RootReportIn,
    SinkCommitOut,
    TableBarriersOut,
)
from metaservice.db.models import BarrierRow, TableRow
from metaservice.deps import Context, ReadSession, WriteSession
from metaservice.jobs import repository as jobs_repo
from metaservice.jobs.endpoints import position_out
from metaservice.jobs.schemas import PositionOut
from metaservice.names import CatalogPath, DatabasePath, JobPath, TableName, TablePath
from metaservice.schemas import INT64_MAX, TextInt
from metaservice.tables import repository as tables_repo

router = APIRouter(tags=["barriers"])

BarrierPath = Annotated[TextInt, Path(ge=0, le=INT64_MAX)]


@router.post("/jobs/{job}/barriers/next", response_model=PositionOut,
             response_model_exclude_unset=True, operation_id="next_barrier")
def next_barrier(job: JobPath, session: WriteSession, ctx: Context,
                 body: Annotated[NextIn | None, Body()] = None) -> dict:
    """wait, process (pinned until commit or abort) or abort."""
    return position_out(service.next_barrier(session, ctx, job, (body or NextIn()).after))


@router.post("/commit/{job}/{catalog}/{database}/{table}", response_model=CompletedOut,
             operation_id="commit_barrier")
def commit_barrier(job: JobPath, catalog: CatalogPath, database: DatabasePath, table: TablePath,
                   body: CommitIn, session: WriteSession, ctx: Context) -> CompletedOut:
    """The job's sink snapshot completes its pinned barrier. Exact repeats are idempotent."""
    done = service.commit(session, ctx, job, TableName(catalog, database, table),
                          barrier=body.barrier, snapshot_id=body.snapshot_id)
    return CompletedOut(table=done.table, barrier=done.barrier, snapshot_id=done.snapshot_id)


@router.post("/jobs/{job}/barriers/{barrier}/abort", response_model=AbortOut,
             operation_id="abort_barrier")
def abort_barrier(job: JobPath, barrier: BarrierPath, session: WriteSession, ctx: Context,
                  body: Annotated[AbortIn | None, Body()] = None) -> AbortOut:
    result = service.abort(session, ctx, job, barrier, (body or AbortIn()).reason)
    return AbortOut(job=result.job, barrier=result.barrier, attempts=result.attempts)


@router.post("/tables/{catalog}/{database}/{table}/barriers", response_model=CompletedOut,
             operation_id="report_root_barrier")
def report_root_barrier(catalog: CatalogPath, database: DatabasePath, table: TablePath,
                        body: RootReportIn, session: WriteSession, ctx: Context) -> CompletedOut:
    """Ingestion reports a root snapshot; the latest snapshot again is a heartbeat."""
    done = service.report_root(session, ctx, TableName(catalog, database, table),
                               snapshot_id=body.snapshot_id, barrier=body.barrier)
    return CompletedOut(table=done.table, barrier=done.barrier, snapshot_id=done.snapshot_id)


@router.get("/tables/{catalog}/{database}/{table}/barriers", response_model=TableBarriersOut,
            operation_id="list_table_barriers")
def list_table_barriers(catalog: CatalogPath, database: DatabasePath, table: TablePath,
                        session: ReadSession,
                        before: Annotated[TextInt | None, Query(ge=0, le=INT64_MAX)] = None,
                        limit: Annotated[TextInt, Query(ge=1, le=1000)] = 100) -> TableBarriersOut:
    """Completed barriers of one table, newest first (page with ``before``)."""
    name = TableName(catalog, database, table)
    row = tables_repo.find_table(session, name)
    if row is None:
        raise errors.UnknownTableError(f"unknown table {name}", table=str(name))
    history = barriers_repo.history(session, row.id, before=before, limit=limit)
    return TableBarriersOut(
        table=str(name), latest_barrier=row.latest_barrier,
        latest_snapshot_id=row.latest_snapshot_id, writer_job=row.writer_job,
        catching_up=row.catching_up,
        barriers=[BarrierOut(barrier=b.barrier, snapshot_id=b.snapshot_id,
                             committed_at=b.committed_at, writer_job=b.writer_job,
                             rolled_back=b.rolled_back) for b in history])


@router.get("/jobs/{job}/progress", response_model=JobProgressOut, operation_id="job_progress")
def job_progress(job: JobPath, session: ReadSession,
                 before: Annotated[TextInt | None, Query(ge=0, le=INT64_MAX)] = None,
                 limit: Annotated[TextInt, Query(ge=1, le=1000)] = 100) -> JobProgressOut:
    """Per barrier: started, sources ready, committed per sink, finished, duration, attempts."""
    if jobs_repo.get_job(session, job) is None:
        raise errors.UnknownJobError(f"unknown job {job!r}", job=job)
    records = barriers_repo.progress_history(session, job, limit=limit, before=before)
    commits: dict[tuple[int, int], list[SinkCommitOut]] = {}
    if records:
        rows = session.execute(
            select(BarrierRow.barrier, BarrierRow.writer_run, BarrierRow.snapshot_id,
                   BarrierRow.committed_at, TableRow.catalog, TableRow.database, TableRow.name)
            .join(TableRow, TableRow.id == BarrierRow.table_id)
            .where(BarrierRow.writer_job == job,
                   BarrierRow.barrier.in_({r.barrier for r in records}))
        ).all()
        for barrier, run, snapshot, at, c, d, t in rows:
            commits.setdefault((barrier, run), []).append(
                SinkCommitOut(table=f"{c}.{d}.{t}", snapshot_id=snapshot, committed_at=at))
    out = []
    for r in records:
        duration = r.finished_at - r.started_at if r.finished_at is not None else None
        hop = (r.finished_at - r.sources_ready_at
               if r.finished_at is not None and r.sources_ready_at is not None else None)
        out.append(ProgressOut(
            barrier=r.barrier, run=r.run, state=r.state, started_at=r.started_at,
            sources_ready_at=r.sources_ready_at, finished_at=r.finished_at,
            duration_ms=duration, hop_latency_ms=hop, attempts=r.attempts,
            last_abort_reason=r.last_abort_reason,
            snapshots={k: v["snapshot_id"] for k, v in r.snapshots.items()},
            previous={k: v["snapshot_id"] for k, v in r.previous.items()},
            committed=sorted(commits.get((r.barrier, r.run), []), key=lambda c: c.table)))
    return JobProgressOut(job=job, progress=out)
