"""Answering version requests: which snapshot of each table to read (SPEC §4).

Reads only: the strong cut of a component is ``min latest(T)`` over its caught-up tables,
which can only grow while the topology stays the same; topology changes keep it from moving
backwards through the catching-up flags (``versions/catching_up.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from metaservice import errors
from metaservice.barriers import repository as barriers_repo
from metaservice.context import ServiceContext
from metaservice.expirations import handout
from metaservice.names import TableName
from metaservice.tables import repository as tables_repo
from metaservice.versions.catching_up import table_states
from metaservice.versions.cuts import (
    Consistency,
    TableState,
    compute_strong_cut,
    compute_weak_cut,
    tables_behind,
)


@dataclass(frozen=True)
class Version:
    table: str
    barrier: int
    snapshot_id: int


def resolve(session: Session, ctx: ServiceContext, tables: Sequence[TableName],
            consistency: Consistency | None, barrier: int | None = None) -> dict[str, Version]:
    """The version of every requested table under ``consistency`` or at an explicit barrier.

    Two statements whatever the number of tables: the requested tables' states with the
    topology version (for the cached components), and every ``snap(T, B)`` with its expiration
    check; a strong answer over components larger than the request reads the rest of their
    tables in one more.
    """
    names = list(dict.fromkeys(str(t) for t in tables))
    found, topology_version = tables_repo.cut_states(session, names)
    states = {n: TableState(n, s.latest, s.catching_up) for n, s in found.items()}
    unknown = [n for n in names if n not in states or states[n].latest is None]
    if barrier is not None:
        behind = tables_behind((states.get(n, TableState(n, None)) for n in names), barrier)
        if behind:
            raise errors.BarrierNotCompleteError(
                f"barrier {barrier} is not complete in {', '.join(behind)}",
                barrier=barrier, tables=behind)
        cuts = {n: barrier for n in names}
    else:
        if unknown:
            raise errors.NoVersionError(
                f"no completed barrier yet for {', '.join(unknown)}", tables=unknown)
        if consistency == Consistency.weak:
            cuts = _weak_cuts(session, ctx, names, states, topology_version)
        else:
            cuts = _strong_cuts(session, ctx, names, states, topology_version)
    snaps = barriers_repo.snaps(session, {found[n].id: cuts[n] for n in names})
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
        result[name] = Version(name, snap.barrier, snap.snapshot_id)
    if missing:
        raise errors.NoVersionError(
            f"no snapshot at or before the cut for {', '.join(missing)}",
            tables=missing, barriers={n: cuts[n] for n in missing})
    if expired:
        handout.raise_expired(expired)
    return result


def _weak_cuts(session: Session, ctx: ServiceContext, names: list[str],
               states: dict[str, TableState], topology_version: int | None) -> dict[str, int]:
    topology = ctx.topology_cache.get(session, topology_version)
    groups: dict[frozenset[str], list[str]] = {}
    for n in names:
        groups.setdefault(topology.component(n), []).append(n)
    cuts: dict[str, int] = {}
    for members in groups.values():
        cut = compute_weak_cut(states[n] for n in members)
        assert cut is not None
        for n in members:
            cuts[n] = cut
    return cuts


def _strong_cuts(session: Session, ctx: ServiceContext, names: list[str],
                 states: dict[str, TableState], topology_version: int | None) -> dict[str, int]:
    topology = ctx.topology_cache.get(session, topology_version)
    catching = [n for n in names if states[n].catching_up]
    if catching:
        raise errors.CatchingUpError(
            f"{', '.join(catching)} joined a pipeline behind its strong cut and is catching up",
            tables=catching)
    components = {topology.component(n) for n in names}
    # A request naming whole components (the usual case) already loaded their states; the
    # other tables of the components are read in one statement.
    rest = set().union(*components) - states.keys()
    if rest:
        more, _ = tables_repo.cut_states(session, rest)
        states = {**states, **{n: TableState(n, s.latest, s.catching_up)
                               for n, s in more.items()}}
    cuts: dict[str, int] = {}
    for component in components:
        cut = compute_strong_cut(states.get(n, TableState(n, None)) for n in component)
        assert cut is not None  # the requested tables of this component have caught up
        for n in component & set(names):
            cuts[n] = cut
    return cuts


def strong_cut_of_component(session: Session, ctx: ServiceContext, table: str) -> int | None:
    topology = ctx.topology_cache.get(session)
    return compute_strong_cut(table_states(session, topology.component(table)).values())
