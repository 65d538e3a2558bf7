"""The cut computation of SPEC §4, as pure functions over plain data.

A *cut* is a barrier B; each table T of the cut is read at ``snap(T, B)``, the snapshot that
completes the greatest barrier ≤ B. The three consistency types differ only in how B is chosen:

- strong: per component C, ``B_C = min latest(T)`` over the tables of C that have caught up
  (a table that joined C behind the cut already served is *catching up*: excluded from the min
  and answered 404 until it passes the cut, so the cut never moves backwards);
- weak: per component touched by the request, the min of ``latest(T)`` over the *requested*
  tables of that component;
- explicit barrier: B as given, valid only where every requested table has ``latest(T) ≥ B``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum


class Consistency(StrEnum):
    strong = "strong"
    weak = "weak"


@dataclass(frozen=True)
class TableState:
    """What a cut needs to know of one table."""

    name: str
    latest: int | None
    catching_up: bool = False

    @property
    def has_caught_up(self) -> bool:
        return self.latest is not None and not self.catching_up


def compute_strong_cut(component: Iterable[TableState]) -> int | None:
    """``B_C`` of one component: the min of ``latest`` over its caught-up tables (None when no
    table of the component has caught up)."""
    latests = [t.latest for t in component if t.has_caught_up]
    return min(latests) if latests else None  # type: ignore[type-var]


def compute_weak_cut(requested: Iterable[TableState]) -> int | None:
    """The min of ``latest`` over the requested tables of one component; None if one of them
    has no completed barrier."""
    latests = [t.latest for t in requested]
    if not latests or any(b is None for b in latests):
        return None
    return min(latests)  # type: ignore[type-var]


def tables_behind(requested: Iterable[TableState], barrier: int) -> list[str]:
    """The tables whose ``latest`` is below ``barrier`` (an explicit barrier is not complete)."""
    return sorted(t.name for t in requested if t.latest is None or t.latest < barrier)


def tables_catching_up_after_join(
    merged: Iterable[TableState], previous_cuts: Iterable[int | None]
) -> set[str]:
    """Which tables of a component are catching up right after a topology change.

    ``previous_cuts`` are the strong cuts that the components merged into this one had before
    the change. The new component must not serve a cut below the greatest of them, so every
    table behind it (or with no barrier yet) is catching up. When no cut was ever possible, only
    the tables with no barrier are.
    """
    floor = max((c for c in previous_cuts if c is not None), default=None)
    behind: set[str] = set()
    for t in merged:
        if t.latest is None or (floor is not None and t.latest < floor):
            behind.add(t.name)
    return behind


def has_caught_up(table_latest: int, component_cut: int | None) -> bool:
    """A catching-up table rejoins the min once its latest barrier reaches the cut that the
    rest of its component serves."""
    return component_cut is None or table_latest >= component_cut


def group_by_component(
    names: Iterable[str], component_of: Mapping[str, frozenset[str]]
) -> dict[frozenset[str], list[str]]:
    groups: dict[frozenset[str], list[str]] = {}
    for name in names:
        groups.setdefault(component_of[name], []).append(name)
    return groups
