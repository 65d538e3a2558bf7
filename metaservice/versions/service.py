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
    """The version of every requested table under ``consistency`` or at an explicit barrier."""
    names = list(dict.fromkeys(str(t) for t in tables))
    rows = tables_repo.find_tables(session, tables)
    states = {str(n): TableState(str(n), r.latest_barrier, r.catching_up) for n, r in rows.items()}
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
            cuts = _weak_cuts(session, ctx, names, states)
        else:
            cuts = _strong_cuts(session, ctx, names, states)
    by_name = {str(n): r for n, r in rows.items()}
    result: dict[str, Version] = {}
    missing: list[str] = []
    found = barriers_repo.snaps(session, {by_name[name].id: cuts[name] for name in names})
    for name in names:
        row = found.get(by_name[name].id)
        if row is None:
            missing.append(name)
            continue
        result[name] = Version(name, row.barrier, row.snapshot_id)
    if missing:
        raise errors.NoVersionError(
            f"no snapshot at or before the cut for {', '.join(missing)}",
            tables=missing, barriers={n: cuts[n] for n in missing})
    handout.refuse_approved(
        session, ((n, by_name[n].id, v.snapshot_id) for n, v in result.items()))
    return result


def _weak_cuts(session: Session, ctx: ServiceContext, names: list[str],
               states: dict[str, TableState]) -> dict[str, int]:
    topology = ctx.topology_cache.get(session)
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
                 states: dict[str, TableState]) -> dict[str, int]:
    topology = ctx.topology_cache.get(session)
    catching = [n for n in names if states[n].catching_up]
    if catching:
        raise errors.CatchingUpError(
            f"{', '.join(catching)} joined a pipeline behind its strong cut and is catching up",
            tables=catching)
    cuts: dict[str, int] = {}
    for component in {topology.component(n) for n in names}:
        # A request naming the whole component (the usual case) already loaded its states.
        member_states = ({n: states[n] for n in component} if component <= states.keys()
                         else table_states(session, component))
        cut = compute_strong_cut(member_states.values())
        assert cut is not None  # the requested tables of this component have caught up
        for n in component & set(names):
            cuts[n] = cut
    return cuts


def strong_cut_of_component(session: Session, ctx: ServiceContext, table: str) -> int | None:
    topology = ctx.topology_cache.get(session)
    return compute_strong_cut(table_states(session, topology.component(table)).values())
