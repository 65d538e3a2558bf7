"""An independent reference of exactness (*exact*, ``snap``; docs/contract.md#exactness) and of
strong and weak cuts (docs/contract.md#consistent-versions).

Written from the contract only, over what a test recorded: per table, the completed barriers the
service accepted (rolled-back ones removed) with their snapshots, and the running topology
(which job writes which table, from which sources). Nothing here imports the service's rules.

- ``snap(T, B)``: the snapshot completing the greatest barrier ≤ B.
- ``exact(T, B)``: T with no running writer is exact at every B from its first completed barrier
  up to ``latest(T)``; T written by a running job J is exact at each barrier it completed, and
  at a B between a completed barrier b and ``latest(T)`` only when every source of J is exact at
  B with the same snapshot as at b (nothing J reads changed in between).
- A cut is a barrier some table of the component completed; a cut over a set of tables is the
  greatest such barrier ≤ the least ``latest`` of the set at which every table of the set is
  exact.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class History:
    """Completed barriers per table and the running topology."""

    barriers: dict[str, dict[int, int]] = field(default_factory=dict)  # table -> {B: snapshot}
    jobs: dict[str, tuple[frozenset[str], frozenset[str]]] = field(default_factory=dict)
    _sorted: dict[str, list[int]] = field(default_factory=dict, repr=False)
    _exact: dict[tuple[str, int], bool] = field(default_factory=dict, repr=False)

    # -- recording ---------------------------------------------------------------------------

    def _changed(self) -> None:
        self._exact.clear()

    def table(self, name: str) -> None:
        self.barriers.setdefault(name, {})
        self._sorted.setdefault(name, [])

    def complete(self, name: str, barrier: int, snapshot: int) -> None:
        """The service accepted ``snapshot`` completing ``barrier`` of ``name``."""
        self.table(name)
        rows = self.barriers[name]
        if barrier in rows:
            assert rows[barrier] == snapshot, (name, barrier, rows[barrier], snapshot)
            return
        rows[barrier] = snapshot
        bisect.insort(self._sorted[name], barrier)
        self._changed()

    def roll_back(self, name: str, barrier: int) -> list[int]:
        """Barriers above ``barrier`` of ``name`` are rolled back; returns them."""
        self.table(name)
        gone = [b for b in self._sorted[name] if b > barrier]
        for b in gone:
            del self.barriers[name][b]
        self._sorted[name] = [b for b in self._sorted[name] if b <= barrier]
        self._changed()
        return gone

    def start(self, job: str, sources: Iterable[str], sinks: Iterable[str]) -> None:
        for t in (*sources, *sinks):
            self.table(t)
        self.jobs[job] = (frozenset(sources), frozenset(sinks))
        self._changed()

    def stop(self, job: str) -> None:
        self.jobs.pop(job, None)
        self._changed()

    # -- reading -----------------------------------------------------------------------------

    def completed(self, name: str) -> list[int]:
        return self._sorted.get(name, [])

    def latest(self, name: str) -> int | None:
        done = self.completed(name)
        return done[-1] if done else None

    def first(self, name: str) -> int | None:
        done = self.completed(name)
        return done[0] if done else None

    def snap_barrier(self, name: str, barrier: int) -> int | None:
        """The greatest completed barrier ≤ ``barrier``."""
        done = self.completed(name)
        i = bisect.bisect_right(done, barrier)
        return done[i - 1] if i else None

    def snap(self, name: str, barrier: int) -> int | None:
        b = self.snap_barrier(name, barrier)
        return None if b is None else self.barriers[name][b]

    def writer(self, name: str) -> str | None:
        writers = [j for j, (_, sinks) in self.jobs.items() if name in sinks]
        assert len(writers) <= 1, (name, writers)
        return writers[0] if writers else None

    def exact(self, name: str, barrier: int) -> bool:
        key = (name, barrier)
        if key not in self._exact:
            self._exact[key] = self._compute_exact(name, barrier)
        return self._exact[key]

    def _compute_exact(self, name: str, barrier: int) -> bool:
        first, latest = self.first(name), self.latest(name)
        if first is None or latest is None or not first <= barrier <= latest:
            return False
        job = self.writer(name)
        if job is None:
            return True
        b = self.snap_barrier(name, barrier)
        assert b is not None
        if b == barrier:
            return True
        sources, _ = self.jobs[job]
        return all(self.exact(s, barrier) and self.snap(s, barrier) == self.snap(s, b)
                   for s in sources)

    # -- components and cuts -----------------------------------------------------------------

    def components(self) -> dict[str, frozenset[str]]:
        groups: list[set[str]] = []
        for sources, sinks in self.jobs.values():
            members = set(sources | sinks)
            for g in [g for g in groups if g & members]:
                groups.remove(g)
                members |= g
            groups.append(members)
        return {t: frozenset(g) for g in groups for t in g}

    def component(self, name: str) -> frozenset[str]:
        return self.components().get(name, frozenset({name}))

    def candidates(self, tables: Iterable[str]) -> list[int]:
        """Barriers completed by some of ``tables``, newest first."""
        return sorted({b for t in tables for b in self.completed(t)}, reverse=True)

    def common_cut(self, tables: Iterable[str], among: Iterable[str] | None = None) -> int | None:
        """The greatest barrier completed by some table of ``among`` (default: ``tables``),
        ≤ the least latest of ``tables``, at which every table of ``tables`` is exact."""
        tables = list(tables)
        latests = [b for b in (self.latest(t) for t in tables) if b is not None]
        if not tables or len(latests) < len(tables):
            return None
        ceiling = min(latests)
        for b in self.candidates(tables if among is None else among):
            if b <= ceiling and all(self.exact(t, b) for t in tables):
                return b
        return None

    def not_exact(self, tables: Iterable[str], barrier: int) -> list[str]:
        return sorted(t for t in set(tables) if not self.exact(t, barrier))

    def trail(self, component: Iterable[str], cut: int) -> int | None:
        """How many barriers (completed by tables of the component) the cut trails the slowest
        derived table (one with a running writer) of the component; None without one."""
        component = list(component)
        derived = [b for b in (self.latest(t) for t in component if self.writer(t) is not None)
                   if b is not None]
        if not derived:
            return None
        slowest = min(derived)
        return len([b for b in self.candidates(component) if cut < b <= slowest])
