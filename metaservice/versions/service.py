"""Answering version requests: which snapshot of each table to read (SPEC §4).

Reads only. Every answer names snapshots exact at its cut (``core/exactness.py``); the cut
of a strong answer is a pure function of stored history that only grows while the topology
stays the same, and topology changes keep it from moving backwards through the catching-up
floors (``versions/catching_up.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

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
    tables_not_exact,
)
from metaservice.core.exactness import Exactness
from metaservice.history import repository as history_repo
from metaservice.history.service import DatabaseHistory
from metaservice.jobs import repository as jobs_repo
from metaservice.names import TableName
from metaservice.tables import repository as tables_repo


@dataclass(frozen=True)
class Version:
    table: str
    barrier: int  # the cut
    snapshot_id: int
    snapshot_barrier: int  # the barrier the snapshot completed (≤ the cut)


def resolve(session: Session, ctx: ServiceContext, tables: Sequence[TableName],
            consistency: Consistency | None, barrier: int | None = None) -> dict[str, Version]:
    """The version of every requested table under ``consistency`` or at an explicit barrier."""
    names = list(dict.fromkeys(str(t) for t in tables))
    found, topology_version = tables_repo.cut_states(session, names)
    topology = ctx.topology_cache.get(session, topology_version)
    history = DatabaseHistory(session, topology, found)
    exactness = Exactness(history)
    states = {n: history.table_state(n) for n in names}
    unknown = [n for n in names if states[n].latest is None]
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
            raise errors.NoVersionError(
                f"no completed barrier yet for {', '.join(unknown)}", tables=unknown)
        if consistency == Consistency.weak:
            cuts = _weak_cuts(history, exactness, names, states)
        else:
            cuts = _strong_cuts(ctx, history, exactness, names)
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
        result[name] = Version(name, cuts[name], snap.snapshot_id, snap.barrier)
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
                 names: list[str]) -> dict[str, int]:
    components = {history.topology.component(n) for n in names}
    history.load(set().union(*components))
    quick = _cuts_at_least_latest(history, components)
    cuts: dict[str, int] = {}
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
        for n in members:
            cuts[n] = cut.barrier
    if catching:
        raise errors.CatchingUpError(
            f"{', '.join(sorted(catching))} joined a pipeline behind its strong cut and is "
            "catching up", tables=sorted(catching))
    if unaligned:
        held = [_holding_back(ctx, history, t) for t in holding_back]
        raise errors.NoVersionError(
            f"no barrier yet at which every table of the pipeline of {', '.join(unaligned)} "
            "is exact: " + "; ".join(reason for reason, _ in held),
            tables=sorted(unaligned), holding_back=[detail for _, detail in held])
    return cuts


def _holding_back(ctx: ServiceContext, history: DatabaseHistory,
                  state: TableState) -> tuple[str, dict[str, object]]:
    """Why ``state`` keeps its component from a strong cut, said of that table and its writer
    (the job that has not produced, and since when), and the same as the error's details."""
    if state.latest is None:
        what = f"{state.name} has no barrier yet"
    elif state.catching_up:
        what = f"{state.name} is catching up (latest barrier {state.latest})"
    else:
        what = f"{state.name} is the furthest behind (latest barrier {state.latest})"
    writer = history.topology.writer(state.name)
    since = None
    if writer is None:
        who = "it is a root table (ingestion reports its barriers)"
    else:
        job = jobs_repo.get_job(history.session, writer.job)
        if job is None:
            raise errors.UnknownJobError(f"unknown job {writer.job!r}", job=writer.job)
        since = job.started_at
        who = f"its writer, job {writer.job}, has been running since {_utc(since)}"
        if since is not None:
            who += f" ({_duration(ctx.clock.now_ms() - since)})"
        if state.latest is None:
            who += " without committing a barrier"
    return f"{what}; {who}", {"table": state.name, "latest_barrier": state.latest,
                              "catching_up": state.catching_up,
                              "writer_job": None if writer is None else writer.job,
                              "writer_started_at": since}


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
