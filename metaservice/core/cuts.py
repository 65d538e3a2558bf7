"""The cut computation of docs/contract.md#consistent-versions, as pure functions over plain data
and a barrier history.

A *cut* is a barrier B; each table T of the cut is read at ``snap(T, B)``. Every cut is a
barrier at which each table it serves is *exact* (``core/exactness.py``), chosen among the
barriers those tables completed:

- strong: per component C, the greatest barrier ≤ ``min latest(T)`` at which every caught-up
  table of C is exact. A table that joined C when C's cut was F is *catching up* (404, left out
  of the min) and the component is held at F until the catching-up tables are exact with the
  rest at a barrier ≥ F: then they rejoin. Strong cuts therefore never move backwards, and
  catching up ends as soon as the new tables reach F (``docs/decisions.md``);
- weak: per component touched by the request, the greatest barrier ≤ ``min latest(T)`` at which
  every *requested* table of that component is exact;
- explicit barrier: B as given, valid only where every requested table has ``latest(T) ≥ B``
  and is exact at B.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from metaservice.core.exactness import Exactness


class Consistency(StrEnum):
    strong = "strong"
    weak = "weak"


@dataclass(frozen=True)
class TableState:
    """What a cut needs to know of one table."""

    name: str
    latest: int | None
    catching_up: bool = False
    # The strong cut its component had when it joined (None: no cut was possible then).
    catch_up_floor: int | None = None


@dataclass(frozen=True)
class StrongCut:
    """A component's strong cut, and whether its catching-up tables have rejoined it."""

    barrier: int | None
    rejoined: bool  # True when no table is catching up any more (flags may still be set)


def _least_latest(states: Iterable[TableState]) -> int:
    """The least ``latest`` of tables that all have a completed barrier."""
    latests = [t.latest for t in states]
    known = [b for b in latests if b is not None]
    if len(known) < len(latests):
        raise ValueError("a table with no completed barrier has no latest")
    return min(known)


def compute_strong_cut(exactness: Exactness, component: Iterable[TableState]) -> StrongCut:
    """``B_C`` of one component (see the module docstring)."""
    states = list(component)
    caught = [t for t in states if not t.catching_up and t.latest is not None]
    behind = [t for t in states if t.catching_up]
    if behind:
        floors = [t.catch_up_floor for t in behind]
        target = max((f for f in floors if f is not None), default=None)
        everyone = caught + behind
        if all(t.latest is not None for t in behind):
            joint = exactness.greatest_common(
                (t.name for t in everyone), _least_latest(everyone),
                extra_candidates=[f for f in floors if f is not None])
            if joint is not None and (target is None or joint >= target):
                return StrongCut(joint, rejoined=True)
        # Held at the lowest floor until the catching-up tables rejoin; no floor: nothing was
        # ever served, so nothing is served until they do.
        if any(f is None for f in floors) or not caught:
            return StrongCut(None, rejoined=False)
        held = min(f for f in floors if f is not None)
        rest = exactness.greatest_common((t.name for t in caught),
                                         _least_latest(caught),
                                         extra_candidates=[held])
        return StrongCut(None if rest is None else min(rest, held), rejoined=False)
    if not caught:
        return StrongCut(None, rejoined=True)
    return StrongCut(exactness.greatest_common(
        (t.name for t in caught), _least_latest(caught)), rejoined=True)


def compute_weak_cut(exactness: Exactness, requested: Iterable[TableState]) -> int | None:
    """The greatest barrier at which every requested table of one component is exact; None if
    one of them has no completed barrier or they share none."""
    states = list(requested)
    if not states or any(t.latest is None for t in states):
        return None
    return exactness.greatest_common((t.name for t in states),
                                     _least_latest(states))


def tables_holding_back(component: Iterable[TableState]) -> list[TableState]:
    """The tables that keep a component with no strong cut from having one: those with no
    barrier yet and those catching up; when there are none (every table has barriers, yet they
    share none at which all are exact), the ones whose ``latest`` is the least, which bound the
    cut. Sorted by name."""
    states = sorted(component, key=lambda t: t.name)
    held = [t for t in states if t.latest is None or t.catching_up]
    if held or not states:
        return held
    least = min(t.latest for t in states)  # type: ignore[type-var]
    return [t for t in states if t.latest == least]


def tables_holding_cut(exactness: Exactness, component: Iterable[TableState],
                       cut: StrongCut) -> list[TableState]:
    """The catching-up tables that hold a component's strong cut ``cut`` (its
    :func:`compute_strong_cut`) back: the cut is pinned at a catching-up floor while the
    caught-up tables alone are exact together at a greater barrier. Empty when nothing is held
    — the tables have rejoined, no cut is served at all (see :func:`tables_holding_back`), or
    the caught-up tables would serve no more than the cut anyway. Every catching-up table of
    the component is named: the cut moves on only once all of them have rejoined. Sorted by
    name."""
    if cut.rejoined or cut.barrier is None:
        return []
    states = sorted(component, key=lambda t: t.name)
    if not any(t.catching_up for t in states):  # the common case: nothing can hold it
        return []
    caught = [t for t in states if not t.catching_up and t.latest is not None]
    if not caught:
        return []
    free = exactness.greatest_common((t.name for t in caught), _least_latest(caught))
    if free is None or free <= cut.barrier:
        return []
    return [t for t in states if t.catching_up]


def tables_behind(requested: Iterable[TableState], barrier: int) -> list[str]:
    """The tables whose ``latest`` is below ``barrier`` (an explicit barrier is not complete)."""
    return sorted(t.name for t in requested if t.latest is None or t.latest < barrier)


def tables_not_exact(exactness: Exactness, names: Iterable[str],
                     barrier: int) -> dict[str, tuple[int | None, int | None]]:
    """The tables not exact at ``barrier``, each with its nearest exact barriers (below,
    above)."""
    return {n: exactness.nearest(n, barrier) for n in sorted(set(names))
            if not exactness.is_exact(n, barrier)}


def floors_after_join(exactness: Exactness, merged: Iterable[TableState],
                      previous_cuts: Iterable[int | None]) -> tuple[int | None, set[str]]:
    """Which tables of a component are catching up right after a topology change, and from
    which floor.

    ``previous_cuts`` are the greatest strong cuts the tables of this component may have been
    served before the change; the new component must not serve below the greatest of them. F is
    that cut, or, when no table of this component completed it (it is the barrier of a table
    a split left elsewhere), the next barrier one of them completed: every cut is a barrier some
    table of its component completed. Every table not exact at F in the new topology (or with
    no barrier) is catching up. With no previous cut, only the tables with no barrier are.
    """
    merged = list(merged)
    floor = max((c for c in previous_cuts if c is not None), default=None)
    if floor is not None:
        floor = least_completed_from(exactness, merged, floor)
    behind: set[str] = set()
    for t in merged:
        if t.latest is None or (floor is not None and not exactness.is_exact(t.name, floor)):
            behind.add(t.name)
    return floor, behind


def least_completed_from(exactness: Exactness, tables: Iterable[TableState], barrier: int) -> int:
    """The least barrier ≥ ``barrier`` that one of ``tables`` completed; ``barrier`` itself when
    none completed one (no table reached it)."""
    completed = [exactness.history.first_change(t.name, barrier - 1, None, t.latest)
                 for t in tables if t.latest is not None and t.latest >= barrier]
    return min((b for b in completed if b is not None), default=barrier)
