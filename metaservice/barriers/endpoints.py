"""HTTP only: the barrier protocol and per-table barrier history."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Body, Query, Response

from metaservice.barriers import service
from metaservice.barriers.dependencies import RootReports
from metaservice.barriers.schemas import (
    AbortIn,
    AbortOut,
    BarrierOut,
    CommitIn,
    CompletedOut,
    JobProgressOut,
    NextIn,
    PositionOut,
    ProgressOut,
    RootReportIn,
    SinkCommitOut,
    TableBarriersOut,
    position_answer,
)
from metaservice.deps import Context, ReadSession, TransactionsDep, WriteSession
from metaservice.names import TableName
from metaservice.path_params import BarrierPath, CatalogPath, DatabasePath, JobPath, TablePath
from metaservice.schemas import INT64_MAX, TextInt

router = APIRouter(tags=["barriers"])


@router.post("/jobs/{job}/barriers/next", response_model=PositionOut,
             response_model_exclude_unset=True, operation_id="next_barrier")
def next_barrier(job: JobPath, transactions: TransactionsDep, ctx: Context,
                 body: Annotated[NextIn | None, Body()] = None) -> Response:
    """wait, process (pinned until commit or abort) or abort."""
    # The hot path: the transaction begins and commits in this thread-pool hop (not one more
    # for the commit), before the answer, serialised once by orjson, is sent.
    with transactions.transaction(write=True) as session:
        position = service.next_barrier(session, ctx, job, (body or NextIn()).after)
    return Response(orjson.dumps(position_answer(position)), media_type="application/json")


@router.post("/commit/{job}/{catalog}/{database}/{table}", response_model=CompletedOut,
             operation_id="commit_barrier")
def commit_barrier(job: JobPath, catalog: CatalogPath, database: DatabasePath, table: TablePath,
                   body: CommitIn, transactions: TransactionsDep, ctx: Context) -> Response:
    """The job's sink snapshot completes its pinned barrier. Exact repeats are idempotent."""
    # The hot path, as ``next``: one thread-pool hop for the transaction, the answer serialised
    # once.
    with transactions.transaction(write=True) as session:
        done = service.commit(session, ctx, job, TableName(catalog, database, table),
                              barrier=body.barrier, snapshot_id=body.snapshot_id)
    return _completed_answer(done)


@router.post("/jobs/{job}/barriers/{barrier}/abort", response_model=AbortOut,
             operation_id="abort_barrier")
def abort_barrier(job: JobPath, barrier: BarrierPath, session: WriteSession, ctx: Context,
                  body: Annotated[AbortIn | None, Body()] = None) -> AbortOut:
    result = service.abort(session, ctx, job, barrier, (body or AbortIn()).reason)
    return AbortOut(job=result.job, barrier=result.barrier, attempts=result.attempts)


@router.post("/tables/{catalog}/{database}/{table}/barriers", response_model=CompletedOut,
             operation_id="report_root_barrier")
async def report_root_barrier(catalog: CatalogPath, database: DatabasePath, table: TablePath,
                              body: RootReportIn, reports: RootReports) -> Response:
    """Ingestion reports a root snapshot; the latest snapshot again is a heartbeat."""
    # On the event loop, with no session of its own: the report joins the reports arriving
    # with it in one transaction (``barriers/group_commit.py``) and is answered once that has
    # committed; the answer is serialised once.
    done = await reports.report(TableName(catalog, database, table),
                                snapshot_id=body.snapshot_id, barrier=body.barrier)
    return _completed_answer(done)


def _completed_answer(done: service.Completed) -> Response:
    """``CompletedOut``, serialised once."""
    return Response(orjson.dumps({"table": done.table, "barrier": done.barrier,
                                  "snapshot_id": done.snapshot_id}),
                    media_type="application/json")


@router.get("/tables/{catalog}/{database}/{table}/barriers", response_model=TableBarriersOut,
            operation_id="list_table_barriers")
def list_table_barriers(catalog: CatalogPath, database: DatabasePath, table: TablePath,
                        session: ReadSession,
                        before: Annotated[TextInt | None, Query(ge=0, le=INT64_MAX)] = None,
                        limit: Annotated[TextInt, Query(ge=1, le=1000)] = 100) -> TableBarriersOut:
    """Completed barriers of one table, newest first (page with ``before``)."""
    name = TableName(catalog, database, table)
    found = service.table_history(session, name, before=before, limit=limit)
    row = found.table
    return TableBarriersOut(
        table=str(name), latest_barrier=row.latest_barrier,
        latest_snapshot_id=row.latest_snapshot_id, writer_job=row.writer_job,
        catching_up=row.catching_up,
        barriers=[BarrierOut(barrier=b.barrier, snapshot_id=b.snapshot_id,
                             committed_at=b.committed_at, writer_job=b.writer_job,
                             rolled_back=b.rolled_back) for b in found.barriers])


@router.get("/jobs/{job}/progress", response_model=JobProgressOut, operation_id="job_progress")
def job_progress(job: JobPath, session: ReadSession,
                 before: Annotated[TextInt | None, Query(ge=0, le=INT64_MAX)] = None,
                 limit: Annotated[TextInt, Query(ge=1, le=1000)] = 100) -> JobProgressOut:
    """Per barrier: started, sources ready, committed per sink, finished, duration, attempts."""
    progress = service.job_progress(session, job, before=before, limit=limit)
    return JobProgressOut(job=job, progress=[ProgressOut(
        barrier=p.record.barrier, run=p.record.run, state=p.record.state,
        started_at=p.record.started_at, sources_ready_at=p.record.sources_ready_at,
        finished_at=p.record.finished_at, duration_ms=p.duration_ms,
        hop_latency_ms=p.hop_latency_ms, attempts=p.record.attempts,
        last_abort_reason=p.record.last_abort_reason,
        snapshots={k: v["snapshot_id"] for k, v in p.record.snapshots.items()},
        previous={k: v["snapshot_id"] for k, v in p.record.previous.items()},
        committed=[SinkCommitOut(table=c.table, snapshot_id=c.snapshot_id,
                                 committed_at=c.committed_at) for c in p.committed])
        for p in progress])
