"""Keeping strong cuts from moving backwards when the topology changes (docs/contract.md#strong).

When a job starts or stops, components merge or split. The new component must not serve a cut
below the greatest one any of its tables may have been served (:func:`served_before`), nor
one that no table of it completed: F is the least such barrier (``core/cuts.py``,
``floors_after_join``). Every table of it not exact at F in the new
topology (or with no barrier yet) is marked *catching up* with F as its floor: it is answered
404 ``catching_up``, and the component is held at F until the catching-up tables are exact
with the rest at a barrier ≥ F (``core/cuts.py``). That is decided from stored history at
every read; the flags are cleared by the catching-up table's next commit once it holds, which
changes no answer (it only spares later reads the work).
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.orm import Session

from metaservice.core.cuts import StrongCut, floors_after_join
from metaservice.core.exactness import Exactness
from metaservice.core.graph import Topology
from metaservice.history.service import DatabaseHistory
from metaservice.repositories import tables as tables_repo
from metaservice.repositories.tables import CutState
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
    # Every old component's cut is taken from the flags as they were before the change, all of
    # them before any flag is written: a split writes the flags of one new component, and the
    # old component's cut read again after that, for the next one, would be another.
    before_change = tables_repo.lock_cut_states(session,
                                                tables_to_refresh(before, after, touched))
    old_history = DatabaseHistory(session, before, dict(before_change))
    old_exactness = Exactness(old_history)
    components = {after.component(t) for t in touched}
    old_cuts = {old: component_cut(old_history, old_exactness, old)
                for old in {before.component(t) for c in components for t in c}}
    for component in components:
        old_components = {before.component(t) for t in component}
        everything = set(component).union(*old_components)
        locked = tables_repo.lock_cut_states(session, everything)  # held already: re-read
        previous_cuts = [served_before(before_change, old_cuts[before.component(t)], t)
                         for t in component if t in before_change]
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


def served_before(states: dict[str, CutState], old_cut: StrongCut, table: str) -> int | None:
    """The greatest strong cut ``table`` may have been served before a topology change, given
    its old component's cut: that cut, while the table is served in it; for a table still
    catching up there, at most its floor (the greatest cut served to anything that formed its
    component, itself included) and at most its latest barrier (it was exact at any cut it was
    served). None when it can have been served none."""
    state = states[table]
    if old_cut.rejoined or not state.catching_up:
        return old_cut.barrier
    if state.catch_up_floor is None or state.latest is None:
        return None
    return min(state.catch_up_floor, state.latest)


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
