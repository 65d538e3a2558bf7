"""Exactness (docs/contract.md#exactness) as pure functions over a read-only barrier history.

``T`` is *exact at* ``B`` when ``snap(T, B)`` holds precisely the effect of all source data up to
``B``. Here, as everywhere in the service, that is decided only for ``first(T) ≤ B ≤ latest(T)``
(beyond its latest barrier nothing is known of a table):

- a table no running job writes is exact at every such ``B`` (nothing changes it between its
  reports);
- a table written by a running job ``J`` is exact at every barrier it completed, and at a ``B``
  beyond such a barrier ``b`` only when every source of ``J`` is exact at ``B`` with the same
  snapshot as at ``b`` (nothing ``J`` reads changed in between). A job that processed several
  barriers in one step completed only the last one: its sink is not exact at those it skipped.

Exactness at a fixed ``B`` only ever turns from false to true while the topology stays the same
(barriers are appended above ``latest``), which is what makes every cut computed from it
monotonic (``docs/decisions.md``).

The history is read through :class:`History`, so the same rules run over the database (one
request's reads, cached) and over plain dicts in the tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Completion:
    """``snapshot_id`` of a table completes ``barrier``."""

    barrier: int
    snapshot_id: int


class History(Protocol):
    """What exactness needs to read. Barriers rolled back are not part of it."""

    def latest(self, table: str) -> int | None:
        """``latest(T)``; None when T has no completed barrier."""

    def writer_sources(self, table: str) -> frozenset[str] | None:
        """The sources of the running job writing ``table``; None when no running job does."""

    def snap(self, table: str, barrier: int) -> Completion | None:
        """``snap(T, B)``: the completion of the greatest barrier ≤ B; None before the first."""

    def first_change(self, table: str, after: int, snapshot_id: int | None,
                     upto: int) -> int | None:
        """The first barrier in ``(after, upto]`` whose snapshot is not ``snapshot_id`` (any
        barrier when ``snapshot_id`` is None), or None: where the table's content changed."""


class Exactness:
    """Exactness queries over one history, memoised for the life of the object (one answer)."""

    def __init__(self, history: History) -> None:
        self.history = history
        self._bounds: dict[tuple[str, int], int | None] = {}

    def bound(self, table: str, barrier: int) -> int | None:
        """The greatest barrier ≤ ``barrier`` at which ``table`` may be exact: ``barrier``
        itself exactly when the table is exact there; otherwise an upper bound that is smaller
        (the table is exact at none above it), at least the barrier ``snap(T, B)`` completed.
        None when the table is exact nowhere at or below ``barrier``."""
        key = (table, barrier)
        if key not in self._bounds:
            self._bounds[key] = self._bound(table, barrier)
        return self._bounds[key]

    def is_exact(self, table: str, barrier: int) -> bool:
        return self.bound(table, barrier) == barrier

    def _bound(self, table: str, barrier: int) -> int | None:
        h = self.history
        latest = h.latest(table)
        if latest is None:
            return None
        x = min(barrier, latest)
        completed = h.snap(table, x)
        if completed is None:
            return None
        sources = h.writer_sources(table)
        if sources is None or completed.barrier == x:
            return x  # a root-like table, or a barrier the table completed
        # Between b (completed) and x the table holds b's data: exact only where no source
        # changed since b, and every source is itself exact.
        b = completed.barrier
        upper = x
        for source in sorted(sources):
            at_b = h.snap(source, b)
            change = h.first_change(source, b, None if at_b is None else at_b.snapshot_id, upper)
            if change is not None:
                upper = change - 1
            if upper <= b:
                return b
        for source in sorted(sources):
            source_bound = self.bound(source, upper)
            if source_bound is None:
                return b
            upper = min(upper, source_bound)
            if upper <= b:
                return b
        if upper == x:
            return x
        return max(b, upper)

    def greatest_common(self, tables: Iterable[str], upper: int,
                        extra_candidates: Iterable[int] = ()) -> int | None:
        """The greatest barrier ≤ ``upper`` at which every table is exact, chosen among the
        barriers the tables completed (and ``extra_candidates``); None when there is none."""
        members = sorted(set(tables))
        if not members:
            return None
        extras = sorted(set(extra_candidates))
        x: int | None = upper
        while x is not None:
            x = self.greatest_candidate(members, extras, x)
            if x is None:
                return None
            lowest = x
            for t in members:
                b = self.bound(t, x)
                if b is None:
                    return None
                lowest = min(lowest, b)
            if lowest == x:
                return x
            x = lowest
        return None

    def greatest_candidate(self, tables: Sequence[str], extras: Sequence[int],
                            upper: int) -> int | None:
        best: int | None = None
        for t in tables:
            c = self.history.snap(t, upper)
            if c is not None and (best is None or c.barrier > best):
                best = c.barrier
        for e in extras:
            if e <= upper and (best is None or e > best):
                best = e
        return best

    def nearest(self, table: str, barrier: int) -> tuple[int | None, int | None]:
        """The nearest barriers at which ``table`` is exact: the greatest ≤ ``barrier`` and the
        next one it completed after it (for ``barrier_not_exact``)."""
        below = self.greatest_common([table], barrier)
        latest = self.history.latest(table)
        above = None
        if latest is not None and latest > barrier:
            above = self.history.first_change(table, barrier, None, latest)
            # ``first_change`` with no snapshot is the first barrier after ``barrier``.
        return below, above


# -- an in-memory history (tests, models) ----------------------------------------------------


@dataclass
class MemoryHistory:
    """A history held in plain dicts: ``completed[T] = {barrier: snapshot}`` and
    ``writers[T] = sources`` of the running job writing T."""

    completed: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    writers: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def latest(self, table: str) -> int | None:
        rows = self.completed.get(table)
        return max(rows) if rows else None

    def writer_sources(self, table: str) -> frozenset[str] | None:
        return self.writers.get(table)

    def snap(self, table: str, barrier: int) -> Completion | None:
        rows = self.completed.get(table, {})
        below = [b for b in rows if b <= barrier]
        if not below:
            return None
        b = max(below)
        return Completion(b, rows[b])

    def first_change(self, table: str, after: int, snapshot_id: int | None,
                     upto: int) -> int | None:
        rows = self.completed.get(table, {})
        for b in sorted(rows):
            if after < b <= upto and (snapshot_id is None or rows[b] != snapshot_id):
                return b
        return None
