"""jobs/service.py called directly: a job's states, run numbers, ownership, sink writers, and
what the planned-job TTL forgets."""

from __future__ import annotations

import pytest

from metaservice import errors
from metaservice.auth.policy import Role
from metaservice.auth.service import ANONYMOUS_ADMIN, Principal
from metaservice.clock import ManualClock
from metaservice.context import ServiceContext
from metaservice.db.session import Database
from metaservice.jobs import service as jobs
from metaservice.names import TableName
from metaservice.repositories import tables as tables_repo
from metaservice.settings import Settings

A, B, C = (TableName("lake", "db", n) for n in "abc")
ALICE = Principal("alice", Role.writer)
BOB = Principal("bob", Role.writer)


@pytest.fixture
def ctx(settings: Settings, clock: ManualClock) -> ServiceContext:
    return ServiceContext(settings, clock)


def _plan(database: Database, ctx: ServiceContext, name: str, sources: list[TableName],
          sinks: list[TableName], principal: Principal = ANONYMOUS_ADMIN) -> jobs.JobView:
    with database.transaction(write=True) as session:
        for table in sources:
            view = jobs.register(session, ctx, name, "source", table, principal)
        for table in sinks:
            view = jobs.register(session, ctx, name, "sink", table, principal)
        return view


def _ran_then_planned_again_past_the_ttl(database: Database, ctx: ServiceContext,
                                         clock: ManualClock, settings: Settings) -> None:
    """Job ``ran``: planned, started, stopped, planned again, then left past the TTL."""
    _plan(database, ctx, "ran", [A], [C])
    with database.transaction(write=True) as session:
        jobs.start(session, ctx, "ran", "latest")
        jobs.unregister(session, ctx, "ran")
    _plan(database, ctx, "ran", [A], [C])
    clock.advance(int(settings.planned_job_ttl_seconds * 1000) + 1)


def _writer(database: Database, table: TableName) -> str | None:
    with database.transaction(write=False) as session:
        row = tables_repo.find_table(session, table)
        return None if row is None else row.writer_job


def test_a_job_belongs_to_the_principal_that_registered_it(
        database: Database, ctx: ServiceContext, clock: ManualClock) -> None:
    """The first registration plans the job (run 0) owned by its principal; registering again
    changes nothing but the time; another writer is refused, an admin is not."""
    first = _plan(database, ctx, "j", [A], [B], ALICE)
    assert (first.job.state, first.job.run, first.job.owner) == ("planned", 0, "alice")
    clock.advance(5)
    again = _plan(database, ctx, "j", [A], [B], ALICE)
    assert (again.sources, again.sinks, again.job.updated_at) == ([A], [B], clock.now_ms())
    with pytest.raises(errors.ForbiddenError):
        _plan(database, ctx, "j", [C], [], BOB)
    assert _plan(database, ctx, "j", [C], [], ANONYMOUS_ADMIN).sources == [A, C]


def test_runs_are_counted_across_unregister_and_register_again(
        database: Database, ctx: ServiceContext, clock: ManualClock) -> None:
    """Start makes run 1 and the sink's writer; unregister terminates, frees the sink and is
    idempotent; registering again plans afresh with only the new edges; the next start is run 2."""
    _plan(database, ctx, "j", [A], [B])
    with database.transaction(write=True) as session:
        started = jobs.start(session, ctx, "j", "latest").view.job
        assert (started.state, started.run, started.started_at) == (
            "running", 1, clock.now_ms())
    with database.transaction(write=True) as session:
        assert jobs.start(session, ctx, "j", "latest").view.job.run == 1  # already running
    assert _writer(database, B) == "j"
    stopped_at = clock.now_ms() + 10
    clock.set(stopped_at)
    for _ in range(2):
        with database.transaction(write=True) as session:
            view = jobs.unregister(session, ctx, "j")
        assert (view.job.state, view.job.terminated_at) == ("terminated", stopped_at)
        clock.advance(10)
    assert _writer(database, B) is None
    with pytest.raises(errors.JobNotPlannedError), database.transaction(write=True) as session:
        jobs.start(session, ctx, "j")
    replanned = _plan(database, ctx, "j", [C], [B])
    assert (replanned.job.state, replanned.job.run, replanned.sources) == ("planned", 1, [C])
    with database.transaction(write=True) as session:
        assert jobs.start(session, ctx, "j", "latest").view.job.run == 2


def test_a_running_job_takes_no_new_edge_and_a_known_edge_is_a_read(
        database: Database, ctx: ServiceContext) -> None:
    """A running job's known edge registers again unchanged (registered_running answers it);
    a new edge is refused (409 job_not_planned)."""
    _plan(database, ctx, "j", [A], [B])
    with database.transaction(write=False) as session:
        assert jobs.registered_running(session, "j", "source", A) is None  # still planned
    with database.transaction(write=True) as session:
        jobs.start(session, ctx, "j", "latest")
    with database.transaction(write=False) as session:
        assert jobs.registered_running(session, "j", "source", A) is not None
        assert jobs.registered_running(session, "j", "sink", A) is None
    assert _plan(database, ctx, "j", [A], [B]).job.state == "running"
    with pytest.raises(errors.JobNotPlannedError):
        _plan(database, ctx, "j", [], [C])


def test_one_writer_per_sink_and_no_cycle_through_running_jobs(
        database: Database, ctx: ServiceContext) -> None:
    """A second job writing a running job's sink is refused at start; an edge closing a cycle
    with the running topology is refused at registration, one with a planned job at start."""
    _plan(database, ctx, "j1", [A], [B])
    _plan(database, ctx, "j2", [B], [A])  # j1 is only planned: no cycle yet
    with database.transaction(write=True) as session:
        jobs.start(session, ctx, "j1", "latest")
    with pytest.raises(errors.CycleError), database.transaction(write=True) as session:
        jobs.start(session, ctx, "j2", "latest")
    with pytest.raises(errors.CycleError):
        _plan(database, ctx, "j3", [B], [A])
    _plan(database, ctx, "j4", [C], [B])
    with pytest.raises(errors.TableHasWriterError), database.transaction(write=True) as session:
        jobs.start(session, ctx, "j4", "latest")
    assert _writer(database, B) == "j1"


def test_a_planned_job_never_started_is_forgotten_after_the_ttl(
        database: Database, ctx: ServiceContext, clock: ManualClock,
        settings: Settings) -> None:
    """Past the TTL a never-started planned job is unknown and a write purges it; a job with
    history planned again is kept, terminated, with its run count."""
    _plan(database, ctx, "old", [A], [B])
    _ran_then_planned_again_past_the_ttl(database, ctx, clock, settings)
    with pytest.raises(errors.UnknownJobError), database.transaction(write=False) as session:
        jobs.get(session, ctx, "old")
    _plan(database, ctx, "new", [C], [])  # any registration purges
    with database.transaction(write=False) as session:
        assert [v.job.name for v in jobs.list_all(session, ctx, None)] == ["new", "ran"]
        ran = jobs.get(session, ctx, "ran").job
        assert (ran.state, ran.run) == ("terminated", 1)


def test_a_job_with_history_planned_again_is_never_unknown(
        database: Database, ctx: ServiceContext, clock: ManualClock,
        settings: Settings) -> None:
    """A job that ran, planned again and left past the TTL stays known (docs/contract.md#jobs: only
    a job never started is forgotten)."""
    _ran_then_planned_again_past_the_ttl(database, ctx, clock, settings)
    with database.transaction(write=False) as session:
        assert jobs.get(session, ctx, "ran").job.run == 1
        assert "ran" in [view.job.name for view in jobs.list_all(session, ctx, None)]
    with database.transaction(write=True) as session:
        jobs.unregister(session, ctx, "ran")
        assert jobs.get(session, ctx, "ran").job.state == "terminated"
