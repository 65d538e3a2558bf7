"""Keeping strong cuts from moving backwards when the topology changes (docs/contract.md#strong).

When a job starts or stops, components merge or split. The new component must not serve a cut
below the greatest one its parts served, F. Every table of it not exact at F in the new
topology (or with no barrier yet) is marked *catching up* with F as its floor: it is answered
404 ``catching_up``, and the component is held at F until the catching-up tables are exact
with the rest at a barrier ≥ F (``core/cuts.py``). That is decided from stored history at
every read; the flags are cleared by the catching-up table's next commit once it holds, which
changes no answer (it only spares later reads the work).
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.orm import Session

from metaservice.core.cuts import floors_after_join
from metaservice.core.exactness import Exactness
from metaservice.core.graph import Topology
from metaservice.history.service import DatabaseHistory
from metaservice.repositories import tables as tables_repo
from metaservice.versions.service import component_cut


def tables_to_refresh(before: Topology, after: Topology, touched: Iterable[str]) -> set[str]:
    """The tables :func:`refresh_after_topology_change` reads and may write: every component
    containing a touched table, with the components its tables were in before. A caller that
    locks tables of its own locks these with them, in one go (the lock order is by id)."""
    everything: set[str] = set()
    for component in {after.component(t) for t in touched}:
        everything |= component
        everything = everything.union(*(before.component(t) for t in component))
    return everything


def refresh_after_topology_change(session: Session, before: Topology, after: Topology,
                                  touched: Iterable[str]) -> None:
    """Recompute the catching-up flags of every component containing a touched table.
    Called with the topology lock held, after the change is written; the rows of
    :func:`tables_to_refresh` are locked first, all at once."""
    touched = set(touched)
    tables_repo.lock_cut_states(session, tables_to_refresh(before, after, touched))
    components = {after.component(t) for t in touched}
    for component in components:
        old_components = {before.component(t) for t in component}
        everything = set(component).union(*old_components)
        locked = tables_repo.lock_cut_states(session, everything)  # held already: re-read
        old_history = DatabaseHistory(session, before, dict(locked))
        old_exactness = Exactness(old_history)
        previous_cuts: list[int | None] = []
        for old in old_components:
            cut = component_cut(old_history, old_exactness, old)
            served_here = any(t in component and (cut.rejoined or not locked[t].catching_up)
                              for t in old if t in locked)
            if served_here:
                previous_cuts.append(cut.barrier)
        new_history = DatabaseHistory(session, after, dict(locked))
        floor, behind = floors_after_join(
            Exactness(new_history), (new_history.table_state(t) for t in sorted(component)),
            previous_cuts)
        for name in sorted(component):
            state = locked.get(name)
            if state is None:
                continue
            flag = name in behind
            wanted_floor = floor if flag else None
            if flag != state.catching_up or wanted_floor != state.catch_up_floor:
                tables_repo.set_catching_up(session, state.id, flag, wanted_floor)


def rejoin_if_caught_up(session: Session, topology: Topology, qualified: str) -> None:
    """After a commit to a catching-up table: once its component's catching-up tables have
    rejoined the cut, clear their flags. Called with the topology lock held."""
    history = DatabaseHistory(session, topology)
    component = topology.component(qualified)
    if component_cut(history, Exactness(history), component).rejoined:
        for name in sorted(component):
            state = history.state(name)
            if state is not None and state.catching_up:
                tables_repo.set_catching_up(session, state.id, False, None)
