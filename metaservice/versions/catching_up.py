"""Keeping strong cuts from moving backwards when the topology changes (SPEC §4).

When a job starts or stops, components merge or split. Every table of a changed component that
is behind the strong cut its old component(s) already served — or has no barrier yet — is marked
*catching up*: excluded from the min and answered 404 ``catching_up`` until a commit brings it
to the cut the rest of its component serves.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select, tuple_, update
from sqlalchemy.orm import Session

from metaservice.db.models import TableRow
from metaservice.names import TableName
from metaservice.topology.graph import Topology
from metaservice.versions.cuts import (
    TableState,
    compute_strong_cut,
    has_caught_up,
    tables_catching_up_after_join,
)


def table_states(session: Session, names: Iterable[str], *,
                 for_update: bool = False) -> dict[str, TableState]:
    keys = [TableName.parse(n) for n in names]
    if not keys:
        return {}
    stmt = (select(TableRow.catalog, TableRow.database, TableRow.name, TableRow.latest_barrier,
                   TableRow.catching_up)
            .where(tuple_(TableRow.catalog, TableRow.database, TableRow.name).in_(
                [(k.catalog, k.database, k.table) for k in keys]))
            .order_by(TableRow.id))
    if for_update:
        stmt = stmt.with_for_update()
    states = {}
    for catalog, database, name, latest, catching_up in session.execute(stmt):
        qualified = f"{catalog}.{database}.{name}"
        states[qualified] = TableState(qualified, latest, bool(catching_up))
    for n in names:
        states.setdefault(n, TableState(n, None, False))
    return states


def refresh_after_topology_change(session: Session, before: Topology, after: Topology,
                                  touched: Iterable[str]) -> None:
    """Recompute the catching-up flags of every component containing a touched table.
    Called with the topology lock held, after the change is written."""
    components = {after.component(t) for t in touched}
    for component in components:
        old_components = {before.component(t) for t in component}
        everything = set(component).union(*old_components)
        states = table_states(session, everything, for_update=True)
        previous_cuts = [compute_strong_cut(states[t] for t in old) for old in old_components]
        behind = tables_catching_up_after_join((states[t] for t in component), previous_cuts)
        floor_known = any(c is not None for c in previous_cuts)
        for name in component:
            state = states[name]
            flag = name in behind or (not floor_known and state.catching_up)
            if flag != state.catching_up:
                key = TableName.parse(name)
                session.execute(
                    update(TableRow)
                    .where(TableRow.catalog == key.catalog, TableRow.database == key.database,
                           TableRow.name == key.table)
                    .values(catching_up=flag)
                    .execution_options(synchronize_session=False)
                )


def clear_if_caught_up(session: Session, topology: Topology, qualified: str,
                       latest: int) -> None:
    """After a commit brought a catching-up table to ``latest``: rejoin the min once it reached
    the cut."""
    others = table_states(session, topology.component(qualified) - {qualified})
    cut = compute_strong_cut(others.values())
    if has_caught_up(latest, cut):
        key = TableName.parse(qualified)
        session.execute(
            update(TableRow)
            .where(TableRow.catalog == key.catalog, TableRow.database == key.database,
                   TableRow.name == key.table)
            .values(catching_up=False)
            .execution_options(synchronize_session=False))
