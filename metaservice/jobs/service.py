"""The rules of job registration, start and stop (docs/contract.md#jobs,
docs/contract.md#one-writer-per-table, docs/contract.md#no-cycles, docs/contract.md#plan,
docs/contract.md#start, docs/contract.md#stop)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy.orm import Session

from metaservice.auth.service import ANONYMOUS_ADMIN, Principal, ensure_may_act_on_job
from metaservice.barriers.service import next_barrier, pinned_position, start_position
from metaservice.context import ServiceContext
from metaservice.core import protocol
from metaservice.core.graph import JobEdges, Topology
from metaservice.core.positions import Position
from metaservice.db import locks
from metaservice.db.models import JobRow
from metaservice.lineage import emission as lineage_emission
from metaservice.names import TableName
from metaservice.repositories import barriers as barriers_repo
from metaservice.repositories import jobs as jobs_repo
from metaservice.repositories import tables as tables_repo
from metaservice.repositories.topology import load_running_topology
from metaservice.versions.catching_up import refresh_after_topology_change, tables_to_refresh

logger = logging.getLogger(__name__)

Role = Literal["source", "sink"]


@dataclass
class JobView:
    job: JobRow
    sources: list[TableName] = field(default_factory=list)
    sinks: list[TableName] = field(default_factory=list)


def _view(session: Session, job: JobRow) -> JobView:
    edges = jobs_repo.edges_of(session, [job.name])[job.name]
    return JobView(job, edges["source"], edges["sink"])


def _forget_expired(session: Session, ctx: ServiceContext) -> None:
    ttl_ms = int(ctx.settings.planned_job_ttl_seconds * 1000)
    jobs_repo.purge_expired_planned(session, ctx.clock.now_ms() - ttl_ms)


def _planned_cutoff(ctx: ServiceContext) -> int:
    return ctx.clock.now_ms() - int(ctx.settings.planned_job_ttl_seconds * 1000)


def _is_forgotten(job: JobRow, ctx: ServiceContext) -> bool:
    """A planned job never started, past the TTL (a job with history is never forgotten)."""
    return job.state == "planned" and job.run == 0 and job.updated_at < _planned_cutoff(ctx)


def get(session: Session, ctx: ServiceContext, name: str) -> JobView:
    job = jobs_repo.get_job(session, name)
    protocol.refuse_unknown_job(name, None if job is None or _is_forgotten(job, ctx) else job)
    assert job is not None
    return _view(session, job)


def list_all(session: Session, ctx: ServiceContext, state: str | None) -> list[JobView]:
    jobs = jobs_repo.list_jobs(session, state=state, planned_since_ms=_planned_cutoff(ctx))
    edges = jobs_repo.edges_of(session, [j.name for j in jobs])
    return [JobView(j, edges[j.name]["source"], edges[j.name]["sink"]) for j in jobs]


def registered_running(session: Session, name: str, role: Role, table: TableName,
                       principal: Principal = ANONYMOUS_ADMIN) -> JobView | None:
    """The view of a running job that already has this edge (``None`` otherwise): registering
    it again changes nothing, so a read answers it. A streaming sink registers its edge at
    every micro-batch; this keeps those calls off the write path."""
    job = jobs_repo.get_job(session, name)
    if job is None or job.state != "running":
        return None
    ensure_may_act_on_job(principal, name, job.owner)
    edges = jobs_repo.edges_of(session, [name])[name]
    return JobView(job, edges["source"], edges["sink"]) if table in edges[role] else None


def register(session: Session, ctx: ServiceContext, name: str, role: Role, table: TableName,
             principal: Principal = ANONYMOUS_ADMIN) -> JobView:
    """Plan: record that job ``name`` reads (source) or writes (sink) ``table``. Idempotent.

    A new job belongs to ``principal``. Ownership is checked on the locked job row, in this
    transaction: of two writers registering the same new job at once, the one whose insert
    created the row owns it and the other is refused (403).
    A terminated job registered again is planned afresh (its history stays). New edges are
    refused once the job runs, and when they would close a cycle with the running topology.
    """
    now = ctx.clock.now_ms()
    _forget_expired(session, ctx)
    jobs_repo.create_planned_job(session, name, now, principal.name)
    job = jobs_repo.get_job(session, name, for_update=True)
    assert job is not None
    ensure_may_act_on_job(principal, name, job.owner)
    if job.state == "terminated":
        jobs_repo.clear_edges(session, name)
        job.state, job.registered_at, job.terminated_at = "planned", now, None
        job.started_at = None
        job.last_committed_barrier = None
    row = tables_repo.ensure_tables(session, [table], now)[table]
    edges = jobs_repo.edges_of(session, [name])[name]
    if table in edges[role]:
        if job.state == "planned":
            job.updated_at = now
        return JobView(job, edges["source"], edges["sink"])
    protocol.refuse_edge_of_running_job(name, job.state)
    sources = {str(t) for t in edges["source"]}
    sinks = {str(t) for t in edges["sink"]}
    (sources if role == "source" else sinks).add(str(table))
    protocol.refuse_cycle(load_running_topology(session).with_job(
        JobEdges(name, frozenset(sources), frozenset(sinks))).find_cycle())
    jobs_repo.add_edge(session, name, row.id, role)
    job.updated_at = now
    logger.info("job_registered", extra={"job": name, "role": role, "table": str(table)})
    return _view(session, job)


@dataclass
class Started:
    view: JobView
    position: Position


def start(session: Session, ctx: ServiceContext, name: str,
          start_from: str | int = "resume", principal: Principal = ANONYMOUS_ADMIN) -> Started:
    """The job becomes running: it becomes the writer of its sinks (exactly one job wins a race
    for a sink), its edges join the topology (no cycle), and its start position is pinned."""
    locks.change_topology(session)
    _forget_expired(session, ctx)
    job = jobs_repo.get_job(session, name, for_update=True)
    protocol.refuse_unknown_job(name, job)
    assert job is not None
    ensure_may_act_on_job(principal, name, job.owner)
    if job.state == "running":
        view = _view(session, job)
        if job.pinned_barrier is not None:
            return Started(view, pinned_position(barriers_repo.JobState.of(job)))
        if job.last_committed_barrier is not None and start_from in ("resume", "latest",
                                                                     "earliest"):
            # A driver restarted mid-run goes on where the run is, as ``next`` would: never a
            # barrier already committed, and with ``previous`` so its read stays incremental.
            # An explicit barrier is pinned as asked (a streaming sink replaying a batch).
            return Started(view, next_barrier(session, ctx, name, None))
        return Started(view, start_position(session, ctx, job, start_from))
    protocol.refuse_start_of_terminated(name, job.state)
    edges = jobs_repo.edge_rows(session, name)
    sink_rows = [t for role, t in edges if role == "sink"]
    before = load_running_topology(session)
    job_edges = JobEdges(
        name,
        frozenset(t.qualified_name for role, t in edges if role == "source"),
        frozenset(t.qualified_name for role, t in edges if role == "sink"),
    )
    after = before.with_job(job_edges)
    # Its sinks and the tables whose flags the change recomputes, locked in one go (by id).
    _lock_tables(session, {t.qualified_name for t in sink_rows}
                 | tables_to_refresh(before, after, job_edges.sources | job_edges.sinks))
    protocol.refuse_sink_of_another_job(name, {t.qualified_name: t.writer_job for t in sink_rows})
    protocol.refuse_cycle(after.find_cycle())
    now = ctx.clock.now_ms()
    for row in sink_rows:
        row.writer_job = name
    job.state, job.run, job.started_at, job.updated_at = "running", job.run + 1, now, now
    job.last_committed_barrier = None
    session.flush()
    refresh_after_topology_change(session, before, after, job_edges.sources | job_edges.sinks)
    position = start_position(session, ctx, job, start_from)
    logger.info("job_started", extra={"job": name, "run": job.run, "barrier": position.barrier})
    return Started(_view(session, job), position)


def _lock_tables(session: Session, names: set[str]) -> None:
    rows = tables_repo.find_tables(session, [TableName.parse(n) for n in names])
    locks.lock_tables(session, [r.id for r in rows.values()])


def unregister(session: Session, ctx: ServiceContext, name: str,
               principal: Principal = ANONYMOUS_ADMIN) -> JobView:
    """The job terminates: its edges leave the topology, its history stays. Idempotent."""
    locks.change_topology(session)
    job = jobs_repo.get_job(session, name, for_update=True)
    protocol.refuse_unknown_job(name, None if job is None or _is_forgotten(job, ctx) else job)
    assert job is not None
    ensure_may_act_on_job(principal, name, job.owner)
    if job.state == "terminated":
        return _view(session, job)
    was_running = job.state == "running"
    before = load_running_topology(session) if was_running else None
    now = ctx.clock.now_ms()
    edges = jobs_repo.edge_rows(session, name)
    if before is not None:  # its sinks and the tables whose flags are recomputed, by id
        touched = {t.qualified_name for _, t in edges}
        _lock_tables(session, touched | tables_to_refresh(
            before, Topology([j for j in before.jobs.values() if j.job != name]), touched))
    for role, table in edges:
        if role == "sink" and table.writer_job == name:
            table.writer_job = None
    if job.pinned_barrier is not None:
        progress = barriers_repo.progress(session, name, job.run, job.pinned_barrier)
        if progress is not None and progress.state == "in_progress":
            progress.state = "aborted"
            progress.last_abort_reason = "job unregistered"
            lineage_emission.barrier_failed(session, ctx, job, "job unregistered")
    job.pinned_barrier = job.pinned_after = job.pinned_at = None
    job.pinned_snapshots = job.pinned_previous = None
    job.pin_invalidated_reason = None
    job.state, job.terminated_at, job.updated_at = "terminated", now, now
    session.flush()
    if before is not None:
        after = load_running_topology(session)
        refresh_after_topology_change(session, before, after,
                                      {t.qualified_name for _, t in edges})
    logger.info("job_unregistered", extra={"job": name})
    return _view(session, job)
