"""Answering version requests: which snapshot of each table to read
(docs/contract.md#consistent-versions).

Reads only. Every answer names snapshots exact at its cut (``core/exactness.py``); the cut
of a strong answer is a pure function of stored history that only grows while the topology
stays the same, and topology changes keep it from moving backwards through the catching-up
floors (``versions/catching_up.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from sqlalchemy.orm import Session

from metaservice import errors
from metaservice.context import ServiceContext
from metaservice.core.cuts import (
    Consistency,
    StrongCut,
    TableState,
    compute_strong_cut,
    compute_weak_cut,
    tables_behind,
    tables_holding_back,
    tables_holding_cut,
    tables_not_exact,
)
from metaservice.core.exactness import Exactness
from metaservice.history.service import DatabaseHistory
from metaservice.names import TableName
from metaservice.repositories import history as history_repo
from metaservice.repositories import jobs as jobs_repo
from metaservice.repositories import tables as tables_repo


@dataclass(frozen=True)
class TableHold:
    """A table that keeps its component's strong cut back, and the job that writes it.

    ``writer_started_at`` (ms since the epoch) is when that job started: for a table that
    joined with its new writer, since when the cut has been held."""

    table: str
    latest_barrier: int | None
    catching_up: bool
    catch_up_floor: int | None
    writer_job: str | None
    writer_started_at: int | None

    def details(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Version:
    table: str
    barrier: int  # the cut
    snapshot_id: int
    snapshot_barrier: int  # the barrier the snapshot completed (≤ the cut)
    # Strong answers only: the catching-up tables pinning the component's cut at their floor.
    held_back_by: tuple[TableHold, ...] = ()


def resolve(session: Session, ctx: ServiceContext, tables: Sequence[TableName],
            consistency: Consistency | None, barrier: int | None = None) -> dict[str, Version]:
    """The version of every requested table under ``consistency`` or at an explicit barrier."""
    names = list(dict.fromkeys(str(t) for t in tables))
    found, topology_version = tables_repo.cut_states(session, names)
    never_heard_of = [n for n in names if n not in found]
    if never_heard_of:
        raise errors.UnknownTableError.among(never_heard_of, tables_repo.qualified_names(session))
    topology = ctx.topology_cache.get(session, topology_version)
    history = DatabaseHistory(session, topology, found)
    exactness = Exactness(history)
    states = {n: history.table_state(n) for n in names}
    unknown = [n for n in names if states[n].latest is None]
    holds: dict[str, tuple[TableHold, ...]] = {}
    if barrier is not None:
        behind = tables_behind(states.values(), barrier)
        if behind:
            raise errors.BarrierNotCompleteError(
                f"barrier {barrier} is not complete in {', '.join(behind)}",
                barrier=barrier, tables=behind)
        before_first = [n for n in names if history.snap(n, barrier) is None]
        if before_first:
            raise errors.NoVersionError(
                f"no snapshot at or before barrier {barrier} for {', '.join(before_first)}",
                tables=before_first, barriers={n: barrier for n in before_first})
        not_exact = tables_not_exact(exactness, names, barrier)
        if not_exact:
            raise errors.BarrierNotExactError(
                f"{', '.join(not_exact)} not exact at barrier {barrier}: "
                "a snapshot there would mix two points of the source data",
                barrier=barrier, tables=list(not_exact),
                nearest={n: {"below": below, "above": above}
                         for n, (below, above) in not_exact.items()})
        cuts = {n: barrier for n in names}
    else:
        if unknown:
            # A new sink of a running job names that job, and since when it has not committed.
            written = _holds(history, (states[n] for n in unknown
                                       if history.topology.writer(n) is not None))
            message = f"no completed barrier yet for {', '.join(unknown)}"
            if not written:
                raise errors.NoVersionError(message, tables=unknown)
            raise errors.NoVersionError(
                f"{message}: " + "; ".join(_reason(ctx, h) for h in written),
                tables=unknown, holding_back=[h.details() for h in written])
        if consistency == Consistency.weak:
            cuts = _weak_cuts(history, exactness, names, states)
        else:
            cuts, holds = _strong_cuts(ctx, history, exactness, names)
    snaps = history_repo.snaps(session, {found[n].id: cuts[n] for n in names})
    result: dict[str, Version] = {}
    missing: list[str] = []
    expired: list[dict[str, object]] = []
    for name in names:
        snap = snaps.get(found[name].id)
        if snap is None:
            missing.append(name)
            continue
        if snap.approved_for_expiration:
            expired.append({"table": name, "snapshot_id": snap.snapshot_id})
        result[name] = Version(name, cuts[name], snap.snapshot_id, snap.barrier,
                               holds.get(name, ()))
    if missing:
        raise errors.NoVersionError(
            f"no snapshot at or before the cut for {', '.join(missing)}",
            tables=missing, barriers={n: cuts[n] for n in missing})
    if expired:
        raise errors.SnapshotExpiredError.approved(expired)
    return result


def _weak_cuts(history: DatabaseHistory, exactness: Exactness, names: list[str],
               states: dict[str, TableState]) -> dict[str, int]:
    groups: dict[frozenset[str], list[str]] = {}
    for n in names:
        groups.setdefault(history.topology.component(n), []).append(n)
    cuts: dict[str, int] = {}
    for members in groups.values():
        cut = compute_weak_cut(exactness, (states[n] for n in members))
        if cut is None:
            raise errors.NoVersionError(
                f"{', '.join(members)} share no barrier at which all of them are exact yet",
                tables=members)
        for n in members:
            cuts[n] = cut
    return cuts


def component_cut(history: DatabaseHistory, exactness: Exactness,
                  component: frozenset[str]) -> StrongCut:
    history.load(component)
    return compute_strong_cut(exactness, (history.table_state(n) for n in sorted(component)))


def _strong_cuts(ctx: ServiceContext, history: DatabaseHistory, exactness: Exactness,
                 names: list[str]) -> tuple[dict[str, int], dict[str, tuple[TableHold, ...]]]:
    """The strong cut of every requested table, and what holds it (only the tables whose
    component's cut a catching-up table holds)."""
    components = {history.topology.component(n) for n in names}
    history.load(set().union(*components))
    quick = _cuts_at_least_latest(history, components)
    cuts: dict[str, int] = {}
    holds: dict[str, tuple[TableHold, ...]] = {}
    catching: list[str] = []
    unaligned: list[str] = []
    holding_back: list[TableState] = []
    for component in components:
        cut = quick.get(component) or component_cut(history, exactness, component)
        members = [n for n in names if n in component]
        behind = [] if cut.rejoined else [n for n in members
                                          if history.table_state(n).catching_up]
        catching += behind
        if cut.barrier is None:
            unaligned += [n for n in members if n not in behind]
            holding_back += tables_holding_back(history.table_state(n) for n in component)
            continue
        held = _holds(history, tables_holding_cut(
            exactness, (history.table_state(n) for n in component), cut))
        for n in members:
            cuts[n] = cut.barrier
            if held:
                holds[n] = held
    if catching:
        behind_holds = _holds(history, (history.table_state(n) for n in sorted(catching)))
        raise errors.CatchingUpError(
            f"{', '.join(sorted(catching))} joined a pipeline behind its strong cut and "
            f"{'is' if len(catching) == 1 else 'are'} catching up: "
            + "; ".join(_reason(ctx, h) for h in behind_holds),
            tables=sorted(catching), holding_back=[h.details() for h in behind_holds])
    if unaligned:
        held_back = _holds(history, holding_back)
        raise errors.NoVersionError(
            f"no barrier yet at which every table of the pipeline of {', '.join(unaligned)} "
            "is exact: " + "; ".join(_reason(ctx, h) for h in held_back),
            tables=sorted(unaligned), holding_back=[h.details() for h in held_back])
    return cuts, holds


def cut_holds(session: Session, ctx: ServiceContext,
              tables: Iterable[str]) -> dict[str, tuple[TableHold, ...]]:
    """For every table of the components of ``tables`` whose strong cut a catching-up table
    holds (see :func:`~metaservice.core.cuts.tables_holding_cut`), what holds it; other tables
    are absent. The catching-up tables themselves are listed too: their component's cut is
    held. Reads nothing more for components with no catching-up table."""
    names = list(tables)
    if not names:
        return {}
    topology = ctx.topology_cache.get(session)
    history = DatabaseHistory(session, topology)
    components = {topology.component(t) for t in names}
    history.load(set().union(*components))
    exactness = Exactness(history)
    found: dict[str, tuple[TableHold, ...]] = {}
    for component in components:
        states = [history.table_state(n) for n in sorted(component)]
        if not any(t.catching_up for t in states):
            continue
        cut = compute_strong_cut(exactness, states)
        held = _holds(history, tables_holding_cut(exactness, states, cut))
        if held:
            found |= dict.fromkeys(component, held)
    return found


def _holds(history: DatabaseHistory, states: Iterable[TableState]) -> tuple[TableHold, ...]:
    """Each table of ``states`` with its writer (the running job writing it, if any) and since
    when that job has been running."""
    found: list[TableHold] = []
    for state in states:
        writer = history.topology.writer(state.name)
        since = None
        if writer is not None:
            job = jobs_repo.get_job(history.session, writer.job)
            if job is None:
                raise errors.UnknownJobError(f"unknown job {writer.job!r}", job=writer.job)
            since = job.started_at
        found.append(TableHold(state.name, state.latest, state.catching_up, state.catch_up_floor,
                               None if writer is None else writer.job, since))
    return tuple(found)


def _reason(ctx: ServiceContext, hold: TableHold) -> str:
    """Why ``hold``'s table keeps its component's strong cut back, said of that table and its
    writer (the job that has not produced, and since when)."""
    if hold.latest_barrier is None:
        what = f"{hold.table} has no barrier yet"
    elif hold.catching_up:
        what = f"{hold.table} is catching up (latest barrier {hold.latest_barrier})"
    else:
        what = f"{hold.table} is the furthest behind (latest barrier {hold.latest_barrier})"
    since = hold.writer_started_at
    if hold.writer_job is None:
        who = "it is a root table (ingestion reports its barriers)"
    else:
        who = f"its writer, job {hold.writer_job}, has been running since {_utc(since)}"
        if since is not None:
            who += f" ({_duration(ctx.clock.now_ms() - since)})"
        if hold.latest_barrier is None:
            who += " without committing a barrier"
    return f"{what}; {who}"


def _utc(ms: int | None) -> str:
    if ms is None:
        return "an unknown time"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _duration(ms: int) -> str:
    seconds = max(0, ms) // 1000
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def _cuts_at_least_latest(history: DatabaseHistory,
                          components: set[frozenset[str]]) -> dict[frozenset[str], StrongCut]:
    """The usual case in one statement: a component with no catching-up table whose tables are
    all exact at their least ``latest`` X (every table with a running writer completed X, every
    other one has a snapshot at X) has X as its strong cut — the greatest barrier it could be.
    Components that are not so simple are left to the full computation."""
    candidates: dict[frozenset[str], int] = {}
    ids: dict[str, int] = {}
    seeks: dict[int, int] = {}
    for component in components:
        latests: dict[str, int] = {}
        for n in component:
            state = history.state(n)
            if state is None or state.latest is None or state.catching_up:
                break
            latests[n] = state.latest
            ids[n] = state.id
        else:
            x = min(latests.values())
            candidates[component] = x
            for n in component:
                seeks[ids[n]] = x
    if not candidates:
        return {}
    found = history_repo.snaps(history.session, seeks)
    cuts: dict[frozenset[str], StrongCut] = {}
    for component, x in candidates.items():
        simple = True
        for n in component:
            snap = found.get(ids[n])
            writer = history.writer_sources(n)
            if snap is None or (writer is not None and snap.barrier != x):
                simple = False
                break
        if simple:
            cuts[component] = StrongCut(x, rejoined=True)
    return cuts


def strong_cut_of_component(session: Session, ctx: ServiceContext, table: str) -> int | None:
    topology = ctx.topology_cache.get(session)
    history = DatabaseHistory(session, topology)
    return component_cut(history, Exactness(history), topology.component(table)).barrier
