"""The barrier protocol's rulebook (docs/contract.md#the-barrier-protocol): every refusal and
decision of a job's protocol and of root reports, as pure functions over plain values.

The services read the state under their locks, ask these rules, and write what they decide
(``barriers/service.py``, ``jobs/service.py``; the catalog's commits reach them through
``barriers/service.py`` too). Nothing here touches a database, the settings or the clock, so
each refusal is tested on values in milliseconds (``tests/metaservice/core/test_rulebook.py``)
and the decisions over thousands of generated cases
(``tests/metaservice/core/test_protocol.py``).

Read it top to bottom: each request's rules are asked in the order written, and the first
that refuses answers.

=================  =================================================================
request            its rules, in order (the error code of each refusal)
=================  =================================================================
plan (register)    ``refuse_edge_of_running_job`` (job_not_planned),
                   ``refuse_cycle`` (cycle)
start              ``refuse_unknown_job`` (unknown_job), ``refuse_start_of_terminated``
                   (job_not_planned), ``refuse_sink_of_another_job`` (table_has_writer),
                   ``refuse_cycle`` (cycle), ``refuse_barrier_in_future``
                   (barrier_in_future); from a barrier: ``refuse_start_at``
                   (barrier_not_complete, barrier_not_exact),
                   ``refuse_unpinned_start`` (snapshot_expired, no_version)
next               ``refuse_not_running`` (unknown_job, job_not_running); the pin:
                   ``refuse_expired_previous`` (snapshot_expired); then
                   :func:`choose_barrier` decides
commit             :func:`admit_sink_commit`: barrier_in_future, unknown_job,
                   unknown_table, not_a_sink, (an exact repeat answers as the first did),
                   job_not_running, held_by_catalog, rollback_in_progress,
                   barrier_rolled_back, invalid_request, barrier_regression,
                   unknown_barrier, then :func:`admit_completed_barrier`
root report        :func:`admit_root_report`: barrier_in_future, held_by_catalog,
                   table_has_writer, rollback_in_progress, then
                   :func:`admit_completed_barrier`; with no barrier given,
                   :func:`wall_clock_barrier` assigns it
a completion       :func:`admit_completed_barrier`: snapshot_expired,
                   barrier_regression (three ways)
abort              ``refuse_not_running``, then :func:`admit_abort` (unknown_barrier)
=================  =================================================================

**Alignment** (the rule, and why strong cuts stay live, are in ``docs/decisions.md``): a job
that no other job of its component is ahead of *leads* and is handed the newest barrier at
which all its sources are exact. A job that others are ahead of (they completed, or hold, a
barrier newer than its previous one) *follows*: it is handed the newest barrier at which its
sources are exact and at which every job ahead of it is exact too — its sinks are exact there,
or it holds that very barrier. Siblings therefore skip barriers together, their sinks keep
sharing exact barriers, and the strong cut of the component keeps advancing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from metaservice import errors
from metaservice.core.exactness import Exactness

# -- the values the rules read ----------------------------------------------------------------


class TableHead(Protocol):
    """A table as its row holds it, locked by the caller."""

    @property
    def name(self) -> str: ...  # qualified
    @property
    def latest_barrier(self) -> int | None: ...
    @property
    def latest_snapshot_id(self) -> int | None: ...
    @property
    def writer_job(self) -> str | None: ...


class JobHead(Protocol):
    """A job as its row holds it, locked by the caller."""

    @property
    def state(self) -> str: ...
    @property
    def pinned_barrier(self) -> int | None: ...
    @property
    def pin_invalidated_reason(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class RecordedBarrier:
    """A barrier row already recorded at the barrier a commit asks for."""

    snapshot_id: int
    rolled_back: bool
    writer_job: str | None


@dataclass(frozen=True, slots=True)
class CommitChecks:
    """What a commit must check in the barrier history, read in one statement under the lock."""

    fence_plan: str | None  # the rollback plan fencing the table
    existing: RecordedBarrier | None  # the row at the barrier
    snapshot_barrier: int | None  # the newest barrier the snapshot already completes
    expiration_approved: bool = False  # the snapshot is approved for expiration (or expired)


@dataclass(frozen=True, slots=True)
class SinkCommit:
    """A job's report that ``snapshot_id`` of its sink completes a barrier (``POST /commit``, or
    a catalog commit whose snapshot names the job), with what was read for it under the locks.
    ``table`` and ``checks`` are None when there is no such table."""

    job_name: str
    job: JobHead | None
    table_name: str
    table: TableHead | None
    is_sink: bool
    has_sources: bool
    barrier: int | None  # as the request names it
    target: int | None  # the barrier to record: ``barrier``, or assigned (a job without sources)
    snapshot_id: int
    checks: CommitChecks | None
    via_catalog: bool


Completion = Literal["new", "repeat", "own_repeat"]
"""What an admitted commit records: a new barrier row; nothing (an exact repeat of a row some
writer recorded); or nothing, and the answer of the job's own earlier commit, which still counts
for its pinned barrier (a report retried, or a restarted run replaying its Iceberg commit)."""


# -- every request ----------------------------------------------------------------------------


def refuse_barrier_in_future(barrier: int | str | None, *, now_ms: int,
                             max_ahead_seconds: float) -> None:
    """``barrier_in_future``: a barrier more than ``max_ahead_seconds`` ahead of the server's
    clock (docs/contract.md#barriers). A barrier near 2^63 would make every later assigned
    barrier (``latest(T) + 1``) overflow, and no real barrier would ever pass it again; as every
    barrier a table completes passes this rule (or is assigned, at most ``latest(T) + 1``) and
    the setting is capped far below 2^63 ms, ``latest(T) + 1`` always fits a signed 64-bit
    integer. A start keyword, or None (an assigned barrier), passes."""
    if not isinstance(barrier, int) or isinstance(barrier, bool):
        return
    bound = now_ms + int(max_ahead_seconds * 1000)
    if barrier > bound:
        raise errors.BarrierInFutureError(
            f"barrier {barrier} is more than {max_ahead_seconds:g} s ahead of the server's clock",
            barrier=barrier, max_barrier=bound, max_barrier_ahead_seconds=max_ahead_seconds)


def refuse_unknown_job(name: str, job: object | None) -> None:
    """``unknown_job``: no job of that name (or a planned one forgotten after its TTL)."""
    if job is None:
        raise errors.UnknownJobError(f"unknown job {name!r}", job=name)


def refuse_not_running(name: str, job: JobHead | None) -> None:
    """``unknown_job``, then ``job_not_running``: ``next``, ``abort`` and a commit are asked
    of a running job."""
    refuse_unknown_job(name, job)
    assert job is not None
    if job.state != "running":
        raise errors.JobNotRunningError(f"job {name!r} is {job.state}, not running",
                                        job=name, state=job.state)


# -- plan and start (docs/contract.md#plan, docs/contract.md#start) ---------------------------


def refuse_edge_of_running_job(name: str, state: str) -> None:
    """``job_not_planned``: a running job's sources and sinks are fixed."""
    if state == "running":
        raise errors.JobNotPlannedError(
            f"job {name!r} is running: register its sources and sinks before it starts",
            job=name, state=state)


def refuse_cycle(cycle: Sequence[str] | None) -> None:
    """``cycle``: the running topology with the job's edges would contain ``cycle``."""
    if cycle is not None:
        raise errors.CycleError("the topology would contain a cycle: " + " -> ".join(cycle),
                                path=list(cycle))


def refuse_start_of_terminated(name: str, state: str) -> None:
    """``job_not_planned``: a terminated job is registered again before it runs again."""
    if state == "terminated":
        raise errors.JobNotPlannedError(
            f"job {name!r} has terminated: register it again to plan a new run",
            job=name, state=state)


def refuse_sink_of_another_job(name: str, writers: Mapping[str, str | None]) -> None:
    """``table_has_writer``: one running job writes a table (docs/contract.md#one-writer-per-table);
    ``writers`` maps each sink of the job starting to the running job that writes it, if any.
    The first sink, by name, that another job writes is named."""
    for sink, writer in sorted(writers.items()):
        if writer is not None and writer != name:
            raise errors.TableHasWriterError(
                f"{sink} is already written by running job {writer!r}", table=sink,
                writer=writer)


def refuse_start_at(barrier: int, *, behind: Sequence[str],
                    not_exact: Mapping[str, tuple[int | None, int | None]]) -> None:
    """``from: <barrier>``: ``barrier_not_complete`` while a source has not completed it
    (``behind``), ``barrier_not_exact`` where a source is not exact at it (``not_exact``, with
    the nearest exact barriers below and above)."""
    if behind:
        raise errors.BarrierNotCompleteError(
            f"barrier {barrier} is not complete in {', '.join(behind)}", barrier=barrier,
            tables=list(behind))
    if not_exact:
        raise errors.BarrierNotExactError(
            f"{', '.join(not_exact)} not exact at barrier {barrier}", barrier=barrier,
            tables=list(not_exact),
            nearest={n: {"below": b, "above": a} for n, (b, a) in not_exact.items()})


def refuse_unpinned_start(barrier: int, *, action: str, expired: bool) -> None:
    """``from: <barrier>`` that could not be pinned: ``snapshot_expired`` when a source snapshot
    at it is approved for expiration, ``no_version`` when a source has none at or before it."""
    if expired:
        raise errors.SnapshotExpiredError(
            f"a source snapshot at barrier {barrier} is approved for expiration", barrier=barrier)
    if action != "process":
        raise errors.NoVersionError(f"some source has no snapshot at or before barrier {barrier}",
                                    barrier=barrier)


# -- next (docs/contract.md#next) -------------------------------------------------------------


def refuse_expired_previous(expired: Sequence[Mapping[str, Any]]) -> None:
    """``snapshot_expired``: the changes since an approved ``previous`` cannot be read any more
    (``{"table", "snapshot_id"}`` each). It is protected while it is the job's last committed
    barrier, so only a client that claims a later ``after`` than the service recorded gets
    here."""
    if expired:
        raise errors.SnapshotExpiredError.approved(expired)


# -- commit (docs/contract.md#commit) and root reports (docs/contract.md#root-reports) ---------


def admit_sink_commit(commit: SinkCommit, *, table_names: Callable[[], Iterable[str]],
                      held_by_catalog: Callable[[], bool]) -> Completion:
    """Every rule of a job's commit, in order; raises the first refusal, or says what to
    record. ``table_names`` (for an unknown table's close matches) and ``held_by_catalog`` are
    read only when a rule needs them."""
    c = commit
    refuse_unknown_job(c.job_name, c.job)
    assert c.job is not None
    if c.table is None:
        raise errors.UnknownTableError.among([c.table_name], table_names())
    if not c.is_sink:
        raise errors.NotASinkError(f"{c.table_name} is not a sink of job {c.job_name!r}",
                                   job=c.job_name, table=c.table_name)
    assert c.checks is not None
    if _is_own_repeat(c):
        return "own_repeat"
    refuse_not_running(c.job_name, c.job)
    if not c.via_catalog:
        refuse_held_by_catalog(c.table, c.snapshot_id, held=held_by_catalog(), by_job=True)
    refuse_fenced(c.table, c.checks)
    if c.job.pin_invalidated_reason is not None and c.barrier in (None, c.job.pinned_barrier):
        raise errors.BarrierRolledBackError(
            f"barrier {c.job.pinned_barrier} of job {c.job_name!r} was invalidated: "
            f"{c.job.pin_invalidated_reason}; ask for the next barrier",
            job=c.job_name, barrier=c.job.pinned_barrier, reason=c.job.pin_invalidated_reason)
    if c.has_sources:
        if c.barrier is None:
            raise errors.InvalidRequestError("barrier is required for a job with sources",
                                             job=c.job_name)
        refuse_not_after_latest(c.table, c.barrier)
        if c.job.pinned_barrier != c.barrier:
            raise errors.UnknownBarrierError(
                f"barrier {c.barrier} was not handed to job {c.job_name!r}",
                job=c.job_name, barrier=c.barrier, pinned=c.job.pinned_barrier)
    assert c.target is not None
    new = admit_completed_barrier(c.table, c.checks, barrier=c.target, snapshot_id=c.snapshot_id)
    return "new" if new else "repeat"


def _is_own_repeat(c: SinkCommit) -> bool:
    """The job's own commit of this snapshot at this barrier, recorded before."""
    existing = c.checks.existing if c.barrier is not None and c.checks is not None else None
    return (existing is not None and not existing.rolled_back
            and existing.snapshot_id == c.snapshot_id and existing.writer_job == c.job_name)


def admit_root_report(table: TableHead, checks: CommitChecks, *, barrier: int,
                      snapshot_id: int, held_by_catalog: Callable[[], bool]) -> bool:
    """Every rule of a root report at ``barrier`` (assigned, when the report named none), after
    ``refuse_barrier_in_future``; raises the first refusal, or says whether there is a new row
    to record. ``held_by_catalog`` is read only for a snapshot that is not the latest: a
    heartbeat may always be sent."""
    if snapshot_id != table.latest_snapshot_id:
        refuse_held_by_catalog(table, snapshot_id, held=held_by_catalog(), by_job=False)
    if table.writer_job is not None:
        raise errors.TableHasWriterError(
            f"{table.name} is written by running job {table.writer_job!r}; it reports its own "
            "commits", table=table.name, writer=table.writer_job)
    refuse_fenced(table, checks)
    return admit_completed_barrier(table, checks, barrier=barrier, snapshot_id=snapshot_id)


def refuse_held_by_catalog(table: TableHead, snapshot_id: int, *, held: bool,
                           by_job: bool) -> None:
    """``held_by_catalog``: a table of the built-in catalog records its barriers with its
    commits (docs/contract.md#the-built-in-catalog); a job's ``POST /commit`` only confirms one
    recorded so, a root report only repeats its latest snapshot (a heartbeat)."""
    if not held:
        return
    if by_job:
        raise errors.HeldByCatalogError(
            f"{table.name} is a table of the built-in catalog: its commit through the catalog "
            "records the barrier, and POST /commit only confirms one recorded so",
            table=table.name, snapshot_id=snapshot_id)
    raise errors.HeldByCatalogError(
        f"{table.name} is a table of the built-in catalog: its commits record its barriers, "
        f"and a report may only repeat its latest snapshot {table.latest_snapshot_id} "
        "(a heartbeat)", table=table.name, snapshot_id=snapshot_id)


def refuse_fenced(table: TableHead, checks: CommitChecks) -> None:
    """``rollback_in_progress``: nothing is written to a table an applied rollback plan fences
    until the plan is completed (docs/contract.md#rollback-plans)."""
    if checks.fence_plan is not None:
        raise errors.RollbackInProgressError(
            f"{table.name} is being rolled back (plan {checks.fence_plan}); "
            "retry once the plan is completed",
            table=table.name, plan=checks.fence_plan, retry_after_ms=1000)


def admit_completed_barrier(table: TableHead, checks: CommitChecks, *, barrier: int,
                            snapshot_id: int) -> bool:
    """The rules of recording that ``snapshot_id`` of ``table`` completes ``barrier``
    (docs/contract.md#barriers-only-move-forward): True for a new row, False for an exact repeat
    (nothing to record, answered as the first was); raises otherwise."""
    refuse_expired_snapshot(table, checks, snapshot_id)
    existing = checks.existing
    if existing is not None and not existing.rolled_back:
        if existing.snapshot_id == snapshot_id:
            return False
        raise errors.BarrierRegressionError(
            f"barrier {barrier} of {table.name} is already completed by snapshot "
            f"{existing.snapshot_id}", table=table.name, barrier=barrier,
            snapshot_id=existing.snapshot_id, latest=table.latest_barrier)
    refuse_not_after_latest(table, barrier)
    if snapshot_id != table.latest_snapshot_id and checks.snapshot_barrier is not None:
        raise errors.BarrierRegressionError(
            f"snapshot {snapshot_id} of {table.name} already completes barrier "
            f"{checks.snapshot_barrier}; only the latest snapshot may complete a newer barrier "
            "(a heartbeat)", table=table.name, barrier=barrier, snapshot_id=snapshot_id,
            recorded_barrier=checks.snapshot_barrier)
    return True


def refuse_expired_snapshot(table: TableHead, checks: CommitChecks, snapshot_id: int) -> None:
    """``snapshot_expired``: a snapshot approved for expiration never becomes a table's latest
    again (docs/contract.md#expired-snapshots-stay-gone): it is being deleted from Iceberg. An
    exact repeat of a barrier already recorded with it records nothing, and passes."""
    if not checks.expiration_approved:
        return
    existing = checks.existing
    if existing is not None and not existing.rolled_back and existing.snapshot_id == snapshot_id:
        return
    raise errors.SnapshotExpiredError(
        f"snapshot {snapshot_id} of {table.name} is approved for expiration; it cannot become "
        "the table's latest", table=table.name, snapshot_id=snapshot_id)


def wall_clock_barrier(now_ms: int, latest: int | None) -> int:
    """The barrier assigned at ``now_ms`` to a table whose latest barrier is ``latest``:
    ``max(now_ms, latest + 1)`` (docs/contract.md#barriers-only-move-forward), the wall clock unless
    that would not move the table forward."""
    return now_ms if latest is None else max(now_ms, latest + 1)


def refuse_not_after_latest(table: TableHead, barrier: int) -> None:
    """``barrier_regression``: a table's barriers only move forward."""
    if table.latest_barrier is not None and barrier <= table.latest_barrier:
        raise errors.BarrierRegressionError(
            f"barrier {barrier} is not after latest({table.name}) = {table.latest_barrier}",
            table=table.name, barrier=barrier, latest=table.latest_barrier)


# -- abort (docs/contract.md#abort) -----------------------------------------------------------


def admit_abort(name: str, job: JobHead, barrier: int,
                progress_state: str | None) -> Literal["abort", "already"]:
    """``abort`` of the pinned barrier; an attempt already aborted (or invalidated) answers as
    it did; ``unknown_barrier`` otherwise."""
    if job.pinned_barrier == barrier:
        return "abort"
    if progress_state in ("aborted", "invalidated"):
        return "already"
    raise errors.UnknownBarrierError(f"barrier {barrier} is not held by job {name!r}",
                                     job=name, barrier=barrier, pinned=job.pinned_barrier)


# -- the decisions: alignment and start positions ---------------------------------------------


@dataclass(frozen=True)
class OtherJob:
    """A running job of the same component, as alignment sees it."""

    name: str
    sinks: frozenset[str]
    pinned: int | None  # the barrier it holds

    def progress(self, exactness: Exactness) -> int | None:
        """The newest barrier it completed (all its sinks) or holds."""
        latests = [exactness.history.latest(k) for k in self.sinks]
        completed = None if not latests or any(b is None for b in latests) else min(latests)  # type: ignore[type-var]
        candidates = [b for b in (completed, self.pinned) if b is not None]
        return max(candidates) if candidates else None


def jobs_ahead(exactness: Exactness, others: Iterable[OtherJob],
               after: int | None) -> list[OtherJob]:
    """The jobs that completed or hold a barrier newer than ``after`` (any, when None)."""
    ahead = []
    for job in others:
        progress = job.progress(exactness)
        if progress is not None and (after is None or progress > after):
            ahead.append(job)
    return ahead


def choose_barrier(exactness: Exactness, sources: Sequence[str], after: int | None,
                   ahead: Sequence[OtherJob]) -> int | None:
    """The barrier to hand a job whose previous barrier is ``after`` (docs/contract.md#alignment
    with the alignment rule), or None when there is none yet (``wait``).

    The barrier is one a source completed (or one a job ahead holds), newer than ``after``,
    at which every source is exact, and at which every job in ``ahead`` is exact or which it
    holds.
    """
    history = exactness.history
    latests = [history.latest(s) for s in sources]
    if not sources or any(b is None for b in latests):
        return None
    held = sorted({j.pinned for j in ahead if j.pinned is not None})
    x: int | None = min(latests)  # type: ignore[type-var]
    while x is not None:
        x = exactness.greatest_candidate(sources, held, x)
        if x is None or (after is not None and x <= after):
            return None
        lower: list[int] = []
        for source in sources:
            bound = exactness.bound(source, x)
            if bound is None:
                return None
            if bound < x:
                lower.append(bound)
        for job in ahead:
            if job.pinned == x:
                continue
            sink_bounds = [exactness.bound(k, x) for k in job.sinks]
            exact_below = (None if not sink_bounds or any(b is None for b in sink_bounds)
                           else min(sink_bounds))  # type: ignore[type-var]
            if exact_below == x:
                continue
            alternatives = [b for b in (exact_below, job.pinned) if b is not None and b < x]
            if not alternatives:
                return None
            lower.append(max(alternatives))
        if not lower:
            return x
        x = min(lower)
    return None


def earliest_barrier(exactness: Exactness, sources: Sequence[str],
                     firsts: Sequence[int]) -> int | None:
    """The oldest barrier, at or after every source's earliest retained one, at which all
    sources are exact (``from: "earliest"``); None when there is none."""
    history = exactness.history
    latests = [b for b in (history.latest(s) for s in sources) if b is not None]
    if not sources or not firsts or len(latests) < len(sources):
        return None
    upper = min(latests)
    x = max(firsts)
    # The candidates are the barriers at which some source changed, oldest first: each step
    # moves strictly forward (``first_change`` answers a barrier after ``x``) and stops at the
    # least ``latest``, so the loop ends, after at most as many steps as there are barriers
    # in between. No cap: a cap would answer "none yet" where a barrier exists.
    while x <= upper:
        if all(exactness.is_exact(s, x) for s in sources):
            return x
        following = [history.first_change(s, x, None, upper) for s in sources]
        nxt = [b for b in following if b is not None]
        if not nxt:
            return None
        x = min(nxt)
    return None
