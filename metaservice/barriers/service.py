"""The barrier protocol's requests (docs/contract.md#the-barrier-protocol): each reads the state
under its locks, asks the rulebook (``core/protocol.py``: every refusal and decision), and writes
what it decided.

Locks are taken through ``db/locks.py``, in its order: topology → job → tables (by id). Races
are resolved by those locks (row locks on PostgreSQL, the write lock on SQLite) and by a
compare-and-swap on ``latest(T)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from metaservice import errors
from metaservice.context import ServiceContext
from metaservice.core import protocol
from metaservice.core.cuts import tables_not_exact
from metaservice.core.delay_formulas import hop_latency
from metaservice.core.exactness import Exactness
from metaservice.core.positions import Position
from metaservice.core.protocol import (
    OtherJob,
    SinkCommit,
    choose_barrier,
    earliest_barrier,
    jobs_ahead,
)
from metaservice.db import locks
from metaservice.db.models import BarrierRow, JobProgressRow, JobRow, TableRow
from metaservice.history.service import DatabaseHistory
from metaservice.lineage import emission as lineage_emission
from metaservice.names import TableName
from metaservice.repositories import barriers as barriers_repo
from metaservice.repositories import jobs as jobs_repo
from metaservice.repositories import tables as tables_repo
from metaservice.retention import handout
from metaservice.versions.catching_up import rejoin_if_caught_up

logger = logging.getLogger(__name__)

@dataclass
class Completed:
    table: str
    barrier: int
    snapshot_id: int


# -- recording a completed barrier ---------------------------------------------------------


def _find_table_for_commit(session: Session, name: TableName, *, create: bool,
                           now_ms: int) -> int | None:
    """The table's id, read without a lock (created on its first report with ``create``), and
    the topology lock taken when the table looks catching up: its commit may clear the flags
    of its pipeline, which depend on the topology, and the topology lock comes first in the
    lock order, before the job's and the table's. None when there is no such table."""
    peek = barriers_repo.peek_table(session, name)
    if peek is None and create:  # the rare first report: create it (race-safe)
        tables_repo.ensure_tables(session, [name], now_ms)
        peek = barriers_repo.peek_table(session, name)
    if peek is None:
        return None
    table_id, catching_up = peek
    if catching_up:
        locks.lock_topology(session)
    return table_id


def _lock_table_for_commit(session: Session, ctx: ServiceContext, name: TableName,
                           table_id: int | None) -> barriers_repo.LockedTable | None:
    """Lock the table row. When the caller holds the topology lock
    (:func:`_find_table_for_commit`), lock the rows of the table's whole pipeline with it, in
    id order: clearing their flags writes them. A table that turned catching up after the
    peek is committed without: its flags are left to a later commit (they change no
    answer)."""
    if table_id is None:
        return None
    if locks.holds_topology(session):
        pipeline = ctx.topology_cache.get(session).component(str(name))
        rows = tables_repo.find_tables(session, [TableName.parse(n) for n in pipeline])
        locks.lock_tables(session, {table_id, *(r.id for r in rows.values())})
    return barriers_repo.lock_table(session, table_id, str(name))


def write_completed_barrier(session: Session, ctx: ServiceContext,
                            table: barriers_repo.LockedTable, checks: barriers_repo.CommitChecks,
                            *, barrier: int, snapshot_id: int, writer_job: str | None,
                            writer_run: int | None, now_ms: int) -> None:
    """Write the barrier row the rulebook admitted (:func:`protocol.admit_completed_barrier`)
    and move ``latest(T)``, committed at ``now_ms`` (read under the table's lock)."""
    name = table.name
    # A rolled-back barrier is completed again after a rollback: the row is reused.
    barriers_repo.write_completed(session, table.id, barrier=barrier, snapshot_id=snapshot_id,
                                  committed_at=now_ms, writer_job=writer_job,
                                  writer_run=writer_run, recomplete=checks.existing is not None)
    if not barriers_repo.advance_latest(session, table, barrier=barrier, snapshot_id=snapshot_id,
                                        committed_at=now_ms):
        raise errors.ConcurrentUpdateError(f"latest({name}) moved concurrently; retry", table=name)
    if table.catching_up and locks.holds_topology(session):  # else a later commit clears them
        rejoin_if_caught_up(session, ctx.topology_cache.get(session), name)
    logger.info("barrier_completed", extra={"table": name, "barrier": barrier,
                                            "snapshot_id": snapshot_id, "job": writer_job})


def refuse_barrier_in_future(ctx: ServiceContext, barrier: int | str | None,
                             now_ms: int) -> None:
    """The rulebook's ``refuse_barrier_in_future`` at ``now_ms`` and the server's setting."""
    protocol.refuse_barrier_in_future(barrier, now_ms=now_ms,
                                      max_ahead_seconds=ctx.settings.max_barrier_ahead_seconds)


def report_root(session: Session, ctx: ServiceContext, name: TableName, *, snapshot_id: int,
                barrier: int | None, via_catalog: bool = False) -> Completed:
    """A root snapshot reported by ingestion that is not a registered job
    (docs/contract.md#root-reports). For a table the built-in catalog holds, its commits report
    (``via_catalog``); anyone else may only report its latest snapshot again (a heartbeat).

    The clock is read twice: for the request's checks, and under the table's lock for the
    barrier it assigns and the time it records (after any commit the lock waited for)."""
    now_ms = ctx.clock.now_ms()
    refuse_barrier_in_future(ctx, barrier, now_ms)
    table_id = _find_table_for_commit(session, name, create=True, now_ms=now_ms)
    table = _lock_table_for_commit(session, ctx, name, table_id)
    assert table is not None
    locked_ms = ctx.clock.now_ms()
    admitted = _admit_root_report(
        session, table, snapshot_id=snapshot_id, barrier=barrier, now_ms=locked_ms,
        held_by_catalog=lambda: (not via_catalog and barriers_repo.held_by_catalog(
            session, name, ctx.settings.catalog_name)))
    return _apply_root_report(session, ctx, table, admitted, locked_ms)


@dataclass(frozen=True, slots=True)
class RootReport:
    """A root report as ingestion sends it: the barrier is assigned when it is None."""

    name: TableName
    snapshot_id: int
    barrier: int | None


@dataclass(frozen=True, slots=True)
class _AdmittedRootReport:
    """A root report that passed every rule under its table's lock: what to record, if new."""

    barrier: int
    snapshot_id: int
    checks: barriers_repo.CommitChecks
    new: bool  # False: an exact repeat, nothing to record


def _admit_root_report(session: Session, table: barriers_repo.LockedTable,
                       *, snapshot_id: int, barrier: int | None, now_ms: int,
                       held_by_catalog: Callable[[], bool],
                       checks: barriers_repo.CommitChecks | None = None) -> _AdmittedRootReport:
    """A root report, under the table's lock, checked by the rulebook, writing nothing: raises
    the refusal, or says what to record. ``checks``, when given, were read for this barrier
    (assigned: ``protocol.wall_clock_barrier`` at ``now_ms``) and snapshot under the lock."""
    if barrier is None:
        barrier = protocol.wall_clock_barrier(now_ms, table.latest_barrier)
    if checks is None:
        checks = barriers_repo.commit_checks(session, table.id, barrier, snapshot_id)
    new = protocol.admit_root_report(table, checks, barrier=barrier, snapshot_id=snapshot_id,
                                     held_by_catalog=held_by_catalog)
    return _AdmittedRootReport(barrier, snapshot_id, checks, new)


def _apply_root_report(session: Session, ctx: ServiceContext, table: barriers_repo.LockedTable,
                       admitted: _AdmittedRootReport, now_ms: int) -> Completed:
    if admitted.new:
        write_completed_barrier(session, ctx, table, admitted.checks, barrier=admitted.barrier,
                                snapshot_id=admitted.snapshot_id, writer_job=None,
                                writer_run=None, now_ms=now_ms)
        lineage_emission.root_reported(session, ctx, table.name, admitted.barrier,
                                       admitted.snapshot_id)
    return Completed(table.name, admitted.barrier, admitted.snapshot_id)


def report_roots_together(session: Session, ctx: ServiceContext,
                          reports: Sequence[RootReport]) -> list[Completed | errors.MetaServiceError
                                                                 | None]:
    """Root reports that arrived together, in one transaction (group commit): per report its
    answer, its refusal, or None for one that must be made in a transaction of its own (its
    table is new or catching up: that path takes other locks first).

    The statements do not grow with the group: the tables are found and locked in one
    statement, in id order (the lock order); what the first report of each table checks is
    read in one, and the rows they add are written in one on PostgreSQL (two on SQLite). A
    table's later reports, in arrival order, are checked and written one by one after those
    (each sees the ones before it, as a transaction of its own would have). A refusal is raised
    before its report writes anything, so it never touches its neighbours; anything raised
    while writing leaves this function, and the caller rolls the group back."""
    outcomes: list[Completed | errors.MetaServiceError | None] = [None] * len(reports)
    admitted_names: set[TableName] = set()
    now_ms = ctx.clock.now_ms()
    for index, report in enumerate(reports):
        try:
            refuse_barrier_in_future(ctx, report.barrier, now_ms)
        except errors.MetaServiceError as refused:
            outcomes[index] = refused
            continue
        admitted_names.add(report.name)
    found = barriers_repo.lock_tables_by_name(session, admitted_names, ctx.settings.catalog_name)
    locked_ms = ctx.clock.now_ms()
    # A table that is catching up is left to a transaction of its own (its commit takes the
    # topology lock first), as is one that does not exist yet (it is created there).
    grouped: list[tuple[int, int]] = sorted(  # (table id, index)
        (found[r.name].table.id, i) for i, r in enumerate(reports)
        if outcomes[i] is None and r.name in found and not found[r.name].table.catching_up)
    tables = {found[reports[i].name].table.id: found[reports[i].name].table for _, i in grouped}
    firsts = {t: i for t, i in reversed(grouped)}  # each table's first report
    barriers = {i: reports[i].barrier if reports[i].barrier is not None
                else protocol.wall_clock_barrier(locked_ms, tables[t].latest_barrier)
                for t, i in firsts.items()}
    first_checks = dict(zip(firsts.values(), barriers_repo.group_commit_checks(
        session, [(t, barriers[i], reports[i].snapshot_id) for t, i in firsts.items()]),
        strict=True))
    to_record: list[tuple[int, barriers_repo.LockedTable, _AdmittedRootReport]] = []
    for table_id, index in grouped:
        report, table = reports[index], tables[table_id]
        if index != firsts[table_id]:  # it sees the reports of its table before it
            _record_root_reports(session, ctx, to_record, outcomes, locked_ms)
            to_record = []
        try:
            admitted = _admit_root_report(
                session, table, snapshot_id=report.snapshot_id,
                barrier=barriers.get(index, report.barrier), now_ms=locked_ms,
                held_by_catalog=lambda held=found[report.name].held_by_catalog: held,
                checks=first_checks.get(index))
        except errors.MetaServiceError as refused:
            outcomes[index] = refused
            continue
        if admitted.new and admitted.checks.existing is None:
            to_record.append((index, table, admitted))
        else:  # an exact repeat, or a rolled-back barrier completed again: on its own
            outcomes[index] = _apply_root_report(session, ctx, table, admitted, locked_ms)
    _record_root_reports(session, ctx, to_record, outcomes, locked_ms)
    return outcomes


def _record_root_reports(session: Session, ctx: ServiceContext,
                         admitted: list[tuple[int, barriers_repo.LockedTable,
                                              _AdmittedRootReport]],
                         outcomes: list[Completed | errors.MetaServiceError | None],
                         now_ms: int) -> None:
    """Write the new barrier rows of admitted root reports, each of another table, at once,
    and set their answers."""
    new = [barriers_repo.NewBarrier(table, a.barrier, a.snapshot_id) for _, table, a in admitted]
    if not barriers_repo.record_new_barriers(session, new, now_ms):
        raise errors.ConcurrentUpdateError("a table's latest barrier moved concurrently; retry")
    for index, table, a in admitted:
        lineage_emission.root_reported(session, ctx, table.name, a.barrier, a.snapshot_id)
        logger.info("barrier_completed", extra={"table": table.name, "barrier": a.barrier,
                                                "snapshot_id": a.snapshot_id, "job": None})
        outcomes[index] = Completed(table.name, a.barrier, a.snapshot_id)


# -- positions: start and next ---------------------------------------------------------------


JobState = barriers_repo.JobState
"""A job row held locked, as the decisions read and change it: the lean state ``next`` reads
(``repositories/barriers.py``), or the state of a start's ORM row, which follows it after the
decision (``_row_follows``)."""

Source = barriers_repo.EdgeTable


def _ids(snapshots: dict[str, Any] | None) -> dict[str, int]:
    return {name: v["snapshot_id"] for name, v in (snapshots or {}).items()}


def pinned_position(job: JobState) -> Position:
    if job.pin_invalidated_reason is not None:  # a rollback invalidated it: not to be processed
        return _abort_position(job)
    # A pin with no previous barrier is a full step: ``previous`` is null (docs/contract.md#start).
    previous = None if job.pinned_after is None else _ids(job.pinned_previous)
    return Position("process", job.pinned_barrier, _ids(job.pinned_snapshots), previous)


def _abort_position(job: JobState) -> Position:
    return Position("abort", job.pinned_barrier, reason=job.pin_invalidated_reason,
                    restart_after=job.last_committed_barrier)


def _wait(ctx: ServiceContext) -> Position:
    return Position("wait", retry_after_ms=ctx.settings.wait_retry_after_ms)


def _pin(session: Session, ctx: ServiceContext, job: JobState, sources: list[Source],
         barrier: int, after: int | None) -> Position:
    """Pin ``barrier`` (after ``after``) for ``job``: ``snap`` of every source at both, unless
    a source has none yet (``wait``) or a snapshot is approved for expiration
    (docs/contract.md#expired-snapshots-stay-gone)."""
    ids = [s.id for s in sources]
    handout.hold(session, ids)  # before the expiration checks read below
    reads = barriers_repo.pin_reads(session, ids, barrier, after)
    names = {s.id: s.qualified_name for s in sources}
    snapshots: dict[str, Any] = {}
    previous: dict[str, Any] = {}
    for r in reads:
        if r.snap is None:
            return _wait(ctx)
        snapshots[names[r.table_id]] = {"barrier": r.snap[0], "snapshot_id": r.snap[1]}
        if r.previous is not None:
            previous[names[r.table_id]] = {"barrier": r.previous[0],
                                           "snapshot_id": r.previous[1]}
    protocol.refuse_expired_previous([{"table": names[r.table_id], "snapshot_id": r.previous[1]}
                                      for r in reads
                                      if r.previous is not None and r.previous_approved])
    if any(r.approved for r in reads):  # a newer barrier is complete once the sources move on
        return Position("wait", retry_after_ms=ctx.settings.wait_retry_after_ms,
                        reason=handout.SNAPSHOT_EXPIRED)
    now = ctx.clock.now_ms()
    barriers_repo.record_hand_out(
        session, job.name, job.run, barrier, after=after, now_ms=now, snapshots=snapshots,
        previous=previous,
        ready_at=max((r.ready_at for r in reads if r.ready_at is not None), default=None))
    _note_pin(job, barrier=barrier, after=after, now_ms=now, snapshots=snapshots,
              previous=previous)
    lineage_emission.barrier_handed_out(session, ctx, job)
    logger.info("barrier_pinned", extra={"job": job.name, "barrier": barrier, "run": job.run})
    return pinned_position(job)


def _note_pin(job: JobState, *, barrier: int, after: int | None, now_ms: int,
              snapshots: dict[str, Any], previous: dict[str, Any]) -> None:
    """Set in ``job`` the pin just written to its row."""
    job.pinned_barrier, job.pinned_after, job.pinned_at = barrier, after, now_ms
    job.pinned_snapshots, job.pinned_previous = snapshots, previous
    job.pin_invalidated_reason = None


def _row_follows(row: JobRow, state: JobState) -> None:
    """A start's ORM row takes what its decision changed: the barrier it goes on after (a
    change of the row, written when the session flushes), and the pin its statement wrote
    (set as the database holds it, not as a change)."""
    if row.last_committed_barrier != state.last_committed_barrier:
        row.last_committed_barrier = state.last_committed_barrier
    if state.pinned_at is None:
        return
    pinned = {"pinned_barrier": state.pinned_barrier, "pinned_after": state.pinned_after,
              "pinned_snapshots": state.pinned_snapshots,
              "pinned_previous": state.pinned_previous, "pin_invalidated_reason": None,
              "pinned_at": state.pinned_at, "updated_at": state.pinned_at}
    for key, value in pinned.items():
        set_committed_value(row, key, value)


def _job_view(session: Session, ctx: ServiceContext, job: JobState,
              edges: barriers_repo.JobEdges) -> tuple[Exactness, list[str], list[OtherJob]]:
    """Read what a decision about ``job`` needs: the history of its component, its sinks and
    the other running jobs of the component (with sources) and the barriers they hold."""
    topology = ctx.topology_cache.get(session, edges.topology_version)
    history = DatabaseHistory(session, topology)
    component = topology.component(edges.sources[0].qualified_name)
    history.load_tails(component)  # the decision reads both (one statement on PostgreSQL)
    me = topology.jobs.get(job.name)
    sinks = sorted(me.sinks) if me is not None else [t.qualified_name for t in edges.sinks]
    names = sorted(j.job for j in topology.jobs.values()
                   if j.job != job.name and j.sources and (j.sources | j.sinks) & component)
    pins = jobs_repo.pinned_barriers(session, names)
    others = [OtherJob(n, topology.jobs[n].sinks, pins.get(n)) for n in names]
    return Exactness(history), sinks, others


def _sinks_latest(exactness: Exactness, sinks: list[str]) -> int | None:
    """The newest barrier any sink completed: no barrier at or below it can be handed out."""
    latests = [b for b in (exactness.history.latest(k) for k in sinks) if b is not None]
    return max(latests) if latests else None


def resume_point(session: Session, job: JobState, sinks: list[Source]) -> int | None:
    """The last barrier every sink completed with a snapshot this job wrote (in any run)."""
    return barriers_repo.last_written_by(session, job.name, [t.id for t in sinks])


def start_position(session: Session, ctx: ServiceContext, row: JobRow,
                   start_from: str | int) -> Position:
    """The start position of the job of ``row`` (``_start_position``); the row follows what
    the decision changed."""
    job = JobState.of(row)
    position = _start_position(session, ctx, job, start_from)
    _row_follows(row, job)
    return position


def _start_position(session: Session, ctx: ServiceContext, job: JobState,
                    start_from: str | int) -> Position:
    """The aligned start position of a job that has just started (docs/contract.md#start), pinned.

    ``resume`` continues after the last barrier all the job's sinks completed with snapshots
    it wrote, as ``next`` would (incremental, ``previous`` set); with no such history it
    starts as ``latest``: the aligned barrier with no previous one, a full step. No barrier at
    or below a sink's latest is ever handed out: the job resumes after it instead.
    """
    refuse_barrier_in_future(ctx, start_from, ctx.clock.now_ms())
    edges = barriers_repo.job_edges(session, job.name)
    sources = edges.sources
    if not sources:
        return Position("none")
    if edges.sinks_fenced:
        return _wait(ctx)
    exactness, sinks, others = _job_view(session, ctx, job, edges)
    floor = _sinks_latest(exactness, sinks)
    if start_from == "resume":
        written = resume_point(session, job, edges.sinks)
        if written is not None:
            return _resume_after(session, ctx, job, sources, exactness, others,
                                 max(written, floor if floor is not None else written))
        start_from = "latest"
    if start_from == "latest":
        barrier = choose_barrier(exactness, [s.qualified_name for s in sources], None,
                                 jobs_ahead(exactness, others, None))
    elif start_from == "earliest":
        barrier = _earliest(session, sources, exactness)
    else:
        barrier = int(start_from)
    if barrier is None:
        return _wait(ctx)
    if floor is not None and barrier <= floor:  # it could never be committed
        return _resume_after(session, ctx, job, sources, exactness, others, floor)
    if start_from in ("latest", "earliest"):
        return _pin(session, ctx, job, sources, barrier, None)
    return _start_at(session, ctx, job, sources, exactness, barrier)


def _resume_after(session: Session, ctx: ServiceContext, job: JobState, sources: list[Source],
                  exactness: Exactness, others: list[OtherJob], after: int) -> Position:
    """Go on after ``after`` as ``next`` would (``previous`` set), also after a wait."""
    job.last_committed_barrier = after
    return _decide(session, ctx, job, sources, exactness, others, after)


def _earliest(session: Session, sources: list[Source], exactness: Exactness) -> int | None:
    firsts = [handout.earliest_retained(session, s.id) for s in sources]
    if any(f is None for f in firsts):
        return None
    return earliest_barrier(exactness, [s.qualified_name for s in sources],
                            [f.barrier for f in firsts])  # type: ignore[union-attr]


def _start_at(session: Session, ctx: ServiceContext, job: JobState, sources: list[Source],
              exactness: Exactness, barrier: int) -> Position:
    """``from: <barrier>``: that barrier, complete and exact in every source, or an error."""
    names = [s.qualified_name for s in sources]
    protocol.refuse_start_at(
        barrier, behind=sorted(s.qualified_name for s in sources
                               if s.latest_barrier is None or s.latest_barrier < barrier),
        not_exact=tables_not_exact(exactness, names, barrier))
    position = _pin(session, ctx, job, sources, barrier, None)
    protocol.refuse_unpinned_start(barrier, action=position.action,
                                   expired=position.reason == handout.SNAPSHOT_EXPIRED)
    return position


def _decide(session: Session, ctx: ServiceContext, job: JobState, sources: list[Source],
            exactness: Exactness, others: list[OtherJob], after: int | None) -> Position:
    """Choose (``core/protocol.py``) and pin the barrier after ``after``, or wait."""
    ahead = jobs_ahead(exactness, others, after)
    barrier = choose_barrier(exactness, [s.qualified_name for s in sources], after, ahead)
    if barrier is None:
        return _wait(ctx)
    return _pin(session, ctx, job, sources, barrier, after)


def _running_job(session: Session, name: str) -> JobRow:
    job = jobs_repo.get_job(session, name, for_update=True)
    protocol.refuse_not_running(name, job)
    assert job is not None
    return job


def next_barrier(session: Session, ctx: ServiceContext, name: str, after: int | None) -> Position:
    """docs/contract.md#next: wait, process (pinned until commit or abort) or abort."""
    if session.new or session.dirty:  # a start's changes, before the statements below
        session.flush()
    job = barriers_repo.lock_job_state(session, name)
    protocol.refuse_not_running(name, job)
    assert job is not None
    if job.pin_invalidated_reason is not None and job.pinned_barrier is not None:
        return _hand_out_invalidation(session, ctx, name)
    edges = barriers_repo.job_edges(session, name)
    if edges.sinks_fenced:  # a rollback is under way: nothing is written meanwhile
        return _wait(ctx)
    if job.pinned_barrier is not None:
        return pinned_position(job)
    if not edges.sources:
        return Position("none")
    if (after is not None and (job.last_committed_barrier is None
                               or after > job.last_committed_barrier)
            and barriers_repo.rolled_back_in_any(session, [t.id for t in edges.sinks], after)):
        after = None  # a barrier a rollback took back: the job restarts where its sinks are
    exactness, sinks, others = _job_view(session, ctx, job, edges)
    candidates = [b for b in (after, job.last_committed_barrier,
                              _sinks_latest(exactness, sinks)) if b is not None]
    effective_after = max(candidates) if candidates else None
    return _decide(session, ctx, job, edges.sources, exactness, others, effective_after)


def _hand_out_invalidation(session: Session, ctx: ServiceContext, name: str) -> Position:
    """The job's pin was invalidated by a rollback: it is told to abort, once; the pin is
    cleared (through the ORM's row, which the lineage event reads)."""
    job = _running_job(session, name)
    assert job.pin_invalidated_reason is not None and job.pinned_barrier is not None
    position = _abort_position(JobState.of(job))
    progress = barriers_repo.progress(session, job.name, job.run, job.pinned_barrier)
    if progress is not None:
        progress.state = "invalidated"
    lineage_emission.barrier_failed(session, ctx, job, job.pin_invalidated_reason)
    _clear_pin(job)
    return position


def _clear_pin(job: JobRow) -> None:
    job.pinned_barrier = job.pinned_after = job.pinned_at = None
    job.pinned_snapshots = job.pinned_previous = None
    job.pin_invalidated_reason = None


def commit(session: Session, ctx: ServiceContext, name: str, table_name: TableName, *,
           barrier: int | None, snapshot_id: int, via_catalog: bool = False) -> Completed:
    """docs/contract.md#commit: a job reports that ``snapshot_id`` of its sink completes its pinned
    barrier. Read under the locks, ask the rulebook (``protocol.admit_sink_commit``), write.
    The clock is read for the request's checks, then once under the locks (``report_root``)."""
    now_ms = ctx.clock.now_ms()
    refuse_barrier_in_future(ctx, barrier, now_ms)
    table_id = _find_table_for_commit(session, table_name, create=False, now_ms=now_ms)
    job = jobs_repo.get_job(session, name, for_update=True)
    found = job is not None
    table = _lock_table_for_commit(session, ctx, table_name, table_id) if found else None
    locked_ms = ctx.clock.now_ms()
    edges = jobs_repo.edge_rows(session, name) if found else []
    sinks = [t for role, t in edges if role == "sink"]
    has_sources = any(role == "source" for role, _ in edges)
    is_sink = table is not None and table.id in {t.id for t in sinks}
    target, checks = None, None
    if is_sink:
        assert table is not None
        # A job without sources lets the service assign the barrier, as for a root report.
        target = barrier if barrier is not None or has_sources else (
            protocol.wall_clock_barrier(locked_ms, table.latest_barrier))
        checks = barriers_repo.commit_checks(session, table.id,
                                             -1 if target is None else target, snapshot_id)
    verdict = protocol.admit_sink_commit(
        SinkCommit(job_name=name, job=job, table_name=str(table_name), table=table,
                   is_sink=is_sink, has_sources=has_sources, barrier=barrier, target=target,
                   snapshot_id=snapshot_id, checks=checks, via_catalog=via_catalog),
        table_names=lambda: tables_repo.qualified_names(session),
        held_by_catalog=lambda: barriers_repo.held_by_catalog(session, table_name,
                                                              ctx.settings.catalog_name))
    assert job is not None and table is not None and checks is not None and target is not None
    if verdict == "own_repeat":
        # It answers as the first did and counts for the pinned barrier.
        if (job.state == "running" and has_sources and job.pinned_barrier == barrier
                and job.pin_invalidated_reason is None):
            _finish_if_all_sinks_committed(session, ctx, job, sinks, target, locked_ms)
        return Completed(str(table_name), target, snapshot_id)
    if verdict == "new":
        write_completed_barrier(session, ctx, table, checks, barrier=target,
                                snapshot_id=snapshot_id, writer_job=name, writer_run=job.run,
                                now_ms=locked_ms)
    job.updated_at = locked_ms
    if has_sources:
        _finish_if_all_sinks_committed(session, ctx, job, sinks, target, locked_ms)
    else:
        lineage_emission.sink_committed(session, ctx, job, str(table_name), target, snapshot_id)
        if job.last_committed_barrier is None or target > job.last_committed_barrier:
            job.last_committed_barrier = target
    return Completed(str(table_name), target, snapshot_id)


def _finish_if_all_sinks_committed(session: Session, ctx: ServiceContext, job: JobRow,
                                   sinks: list[TableRow], barrier: int, now_ms: int) -> None:
    """The job is done with ``barrier`` once every sink holds a snapshot of it written by the
    job, in this run or in an earlier one whose commit a restarted run replays."""
    if {t.id for t in sinks} <= barriers_repo.committed_sinks(session, job.name, barrier):
        progress = barriers_repo.progress(session, job.name, job.run, barrier)
        if progress is not None:
            progress.state, progress.finished_at = "committed", now_ms
        job.last_committed_barrier = barrier
        lineage_emission.barrier_completed(session, ctx, job, barrier)
        _clear_pin(job)
        logger.info("barrier_committed", extra={"job": job.name, "barrier": barrier})


@dataclass
class AbortResult:
    job: str
    barrier: int
    attempts: int


def abort(session: Session, ctx: ServiceContext, name: str, barrier: int,
          reason: str) -> AbortResult:
    """docs/contract.md#abort: the attempt is recorded and the barrier will be handed out again."""
    job = _running_job(session, name)
    progress = barriers_repo.progress(session, name, job.run, barrier)
    if protocol.admit_abort(name, job, barrier,
                            None if progress is None else progress.state) == "already":
        assert progress is not None
        return AbortResult(name, barrier, progress.attempts)
    lineage_emission.barrier_failed(session, ctx, job, reason)
    _clear_pin(job)
    job.updated_at = ctx.clock.now_ms()
    if progress is not None:
        progress.state, progress.last_abort_reason = "aborted", reason[:500]
    logger.info("barrier_aborted", extra={"job": name, "barrier": barrier})
    return AbortResult(name, barrier, progress.attempts if progress else 1)


# -- history ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableHistory:
    """A table's row and a page of its completed barriers, newest first."""

    table: TableRow
    barriers: list[BarrierRow]


def table_history(session: Session, name: TableName, *, before: int | None,
                  limit: int) -> TableHistory:
    row = tables_repo.find_table(session, name)
    if row is None:
        raise errors.UnknownTableError.among([str(name)], tables_repo.qualified_names(session))
    return TableHistory(row, barriers_repo.history(session, row.id, before=before, limit=limit))


@dataclass(frozen=True)
class BarrierProgress:
    """One progress record of a job, its durations, and what it committed to its sinks."""

    record: JobProgressRow
    duration_ms: int | None  # started → finished
    hop_latency_ms: int | None  # sources ready → finished (docs/contract.md#delay)
    committed: list[barriers_repo.SinkCommit]


def job_progress(session: Session, job: str, *, before: int | None,
                 limit: int) -> list[BarrierProgress]:
    """A page of the job's progress records, newest barrier first."""
    protocol.refuse_unknown_job(job, jobs_repo.get_job(session, job))
    records = barriers_repo.progress_history(session, job, limit=limit, before=before)
    commits = barriers_repo.sink_commits(session, job, {r.barrier for r in records})
    return [BarrierProgress(
        r, None if r.finished_at is None else r.finished_at - r.started_at,
        hop_latency(r.sources_ready_at, r.finished_at), commits.get((r.barrier, r.run), []))
        for r in records]
