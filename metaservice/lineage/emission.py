"""OpenLineage events, written to the outbox in the transaction of what they describe.

The barrier protocol calls these as it decides (``barriers/service.py``, ``jobs/service.py``):
a barrier handed out (``START``), completed by every sink (``COMPLETE``), aborted or
invalidated (``FAIL``), and a root report (``COMPLETE`` of the table's ingestion job). The event
is built and written in the caller's transaction, so it exists if and only if the change it
describes was committed; ``sender.py`` delivers it later. With no OpenLineage configuration
(``ctx.lineage`` is None) nothing is written.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.orm import Session

from metaservice import openlineage as ol
from metaservice.context import ServiceContext
from metaservice.db.models import JobRow
from metaservice.repositories import barriers as barriers_repo
from metaservice.repositories import jobs as jobs_repo
from metaservice.repositories import lineage as outbox_repo


def _reads(snapshots: dict[str, Any] | None,
           previous: dict[str, Any] | None) -> list[ol.SourceRead]:
    previous = previous or {}
    reads = []
    for table, read in sorted((snapshots or {}).items()):
        before = previous.get(table)
        reads.append(ol.SourceRead(
            table, read["barrier"], read["snapshot_id"],
            None if before is None else before["barrier"],
            None if before is None else before["snapshot_id"]))
    return reads


def _sinks(session: Session, job: str) -> list[str]:
    return sorted(t.qualified_name for role, t in jobs_repo.edge_rows(session, job)
                  if role == "sink")


def _write(session: Session, ctx: ServiceContext, event_type: ol.EventType, run: ol.BarrierRun,
           reason: str | None = None) -> None:
    naming = ctx.lineage
    assert naming is not None
    tables = [s.table for s in run.inputs] + [k.table for k in run.outputs]
    locations = outbox_repo.catalog_locations(session, tables, naming.catalog_name)
    now = ctx.clock.now_ms()
    event = ol.run_event(event_type, run, event_time_ms=now, naming=naming, locations=locations,
                         reason=reason)
    outbox_repo.add_event(session, job=run.job, event_type=event_type, barrier=run.barrier,
                          payload=json.dumps(event, separators=(",", ":")), now_ms=now)


def _job_run(session: Session, job: JobRow | barriers_repo.JobState, barrier: int, attempts: int,
             outputs: list[ol.SinkWritten]) -> ol.BarrierRun:
    progress = barriers_repo.progress(session, job.name, job.run, barrier)
    snapshots: dict[str, Any] | None
    previous: dict[str, Any] | None
    if progress is not None:
        snapshots, previous = progress.snapshots, progress.previous
    else:
        snapshots, previous = job.pinned_snapshots, job.pinned_previous
    return ol.BarrierRun(job=job.name, barrier=barrier, inputs=_reads(snapshots, previous),
                         outputs=outputs, metaservice_job=job.name, job_run=job.run,
                         attempt=attempts, previous_barrier=job.pinned_after)


def _attempts(session: Session, job: JobRow | barriers_repo.JobState, barrier: int) -> int:
    progress = barriers_repo.progress(session, job.name, job.run, barrier)
    return progress.attempts if progress is not None else 1


def barrier_handed_out(session: Session, ctx: ServiceContext,
                       job: barriers_repo.JobState) -> None:
    """``START``: ``job`` (pinned) was handed its barrier."""
    if ctx.lineage is None or job.pinned_barrier is None:
        return
    barrier = job.pinned_barrier
    outputs = [ol.SinkWritten(t, None) for t in _sinks(session, job.name)]
    _write(session, ctx, "START",
           _job_run(session, job, barrier, _attempts(session, job, barrier), outputs))


def barrier_completed(session: Session, ctx: ServiceContext, job: JobRow, barrier: int) -> None:
    """``COMPLETE``: every sink of ``job`` (still pinned at ``barrier``) committed it; outputs
    name the snapshots the job committed."""
    if ctx.lineage is None:
        return
    committed = {c.table: c.snapshot_id
                 for commits in barriers_repo.sink_commits(session, job.name, {barrier}).values()
                 for c in commits}
    outputs = [ol.SinkWritten(t, committed.get(t)) for t in _sinks(session, job.name)]
    _write(session, ctx, "COMPLETE",
           _job_run(session, job, barrier, _attempts(session, job, barrier), outputs))


def barrier_failed(session: Session, ctx: ServiceContext, job: JobRow, reason: str) -> None:
    """``FAIL``: the attempt of ``job`` at its pinned barrier ends without a commit."""
    if ctx.lineage is None or job.pinned_barrier is None:
        return
    barrier = job.pinned_barrier
    outputs = [ol.SinkWritten(t, None) for t in _sinks(session, job.name)]
    _write(session, ctx, "FAIL",
           _job_run(session, job, barrier, _attempts(session, job, barrier), outputs),
           reason=reason)


def sink_committed(session: Session, ctx: ServiceContext, job: JobRow, table: str,
                   barrier: int, snapshot_id: int) -> None:
    """``COMPLETE`` of a job with no sources (ingestion as a registered job): each commit
    completes a barrier of its sink, as a root report does."""
    if ctx.lineage is None:
        return
    _write(session, ctx, "COMPLETE", ol.BarrierRun(
        job=job.name, barrier=barrier, inputs=[], outputs=[ol.SinkWritten(table, snapshot_id)],
        metaservice_job=job.name, job_run=job.run))


def root_reported(session: Session, ctx: ServiceContext, table: str, barrier: int,
                  snapshot_id: int) -> None:
    """``COMPLETE`` of the root table's ingestion job: ``snapshot_id`` completes ``barrier``."""
    if ctx.lineage is None:
        return
    _write(session, ctx, "COMPLETE", ol.BarrierRun(
        job=ol.ingestion_job(table), barrier=barrier, inputs=[],
        outputs=[ol.SinkWritten(table, snapshot_id)]))
