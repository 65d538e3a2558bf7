"""The barrier history of the database as :class:`~metaservice.core.exactness.History`.

One object serves one answer: it reads the tables' states and the newest rows of each table in
a couple of statements (cuts are almost always among a table's newest barriers) and falls back
to one indexed seek for anything older. Nothing here decides anything.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.orm import Session

from metaservice.core.cuts import TableState
from metaservice.core.exactness import Completion
from metaservice.core.graph import Topology
from metaservice.db.engine import on_postgres
from metaservice.names import TableName, qualified
from metaservice.repositories import history as history_repo
from metaservice.repositories import tables as tables_repo
from metaservice.repositories.tables import CutState

# The newest rows read per table up front. Cuts trail ``latest`` by a few barriers at most;
# anything older is one more seek.
TAIL_DEPTH = 4


class DatabaseHistory:
    def __init__(self, session: Session, topology: Topology,
                 states: dict[str, CutState] | None = None) -> None:
        self.session = session
        self.topology = topology
        self._states: dict[str, CutState | None] = dict(states or {})
        self._tails: dict[str, list[tuple[int, int]]] = {}
        self._seeks: dict[tuple[str, int], tuple[int, int] | None] = {}

    # -- loading ---------------------------------------------------------------------------

    def load(self, names: Iterable[str]) -> None:
        """Read the states of ``names`` not read yet (one statement)."""
        missing = [n for n in dict.fromkeys(names) if n not in self._states]
        if missing:
            found, _ = tables_repo.cut_states(self.session, missing)
            for n in missing:
                self._states[n] = found.get(n)

    def load_tails(self, names: Iterable[str]) -> None:
        """Read the newest rows of ``names`` not read yet (one statement), with their states
        when none is read yet (in the same statement on PostgreSQL)."""
        names = list(dict.fromkeys(names))
        if on_postgres(self.session) and not any(n in self._states for n in names):
            self._load_states_and_tails(names)
            return
        self.load(names)
        untailed = [n for n in dict.fromkeys(names)
                    if n not in self._tails and self._states.get(n) is not None]
        if untailed:
            ids = {self._states[n].id: n for n in untailed}  # type: ignore[union-attr]
            for table_id, rows in history_repo.tails(self.session, list(ids),
                                                      TAIL_DEPTH).items():
                self._tails[ids[table_id]] = rows

    def _load_states_and_tails(self, names: list[str]) -> None:
        keys = [TableName.parse(n) for n in names]
        for n in names:
            self._states[n] = None
        for r in history_repo.states_and_tails_postgres(
                self.session, [(k.catalog, k.database, k.table) for k in keys], TAIL_DEPTH):
            name = qualified(r.catalog, r.database, r.name)
            if self._states[name] is None:
                self._states[name] = CutState(r.id, r.latest_barrier, bool(r.catching_up),
                                              r.catch_up_floor)
                self._tails[name] = []
            if r.barrier is not None:
                self._tails[name].append((int(r.barrier), int(r.snapshot_id or 0)))
        for rows_of_table in self._tails.values():
            rows_of_table.sort(reverse=True)

    def state(self, name: str) -> CutState | None:
        if name not in self._states:
            self.load([name])
        return self._states[name]

    def table_state(self, name: str) -> TableState:
        s = self.state(name)
        if s is None:
            return TableState(name, None)
        return TableState(name, s.latest, s.catching_up, s.catch_up_floor)

    def _tail(self, name: str) -> list[tuple[int, int]]:
        if name not in self._tails:
            self.load_tails(self._with_neighbours(name))
        return self._tails.get(name, [])

    def _with_neighbours(self, name: str) -> list[str]:
        """A table first touched brings its component's tables along: exactness walks there."""
        return sorted(self.topology.component(name))

    # -- History -------------------------------------------------------------------------

    def latest(self, table: str) -> int | None:
        s = self.state(table)
        return None if s is None else s.latest

    def writer_sources(self, table: str) -> frozenset[str] | None:
        writer = self.topology.writer(table)
        return None if writer is None else writer.sources

    def snap(self, table: str, barrier: int) -> Completion | None:
        tail = self._tail(table)
        complete = len(tail) < TAIL_DEPTH
        for b, s in tail:  # newest first
            if b <= barrier:
                return Completion(b, s)
        if complete or not tail:
            return None
        key = (table, barrier)
        if key not in self._seeks:
            state = self.state(table)
            self._seeks[key] = (None if state is None
                                else history_repo.snap_seek(self.session, state.id, barrier))
        found = self._seeks[key]
        return None if found is None else Completion(*found)

    def first_change(self, table: str, after: int, snapshot_id: int | None,
                     upto: int) -> int | None:
        tail = self._tail(table)
        oldest = tail[-1][0] if tail else None
        if len(tail) < TAIL_DEPTH or (oldest is not None and after >= oldest):
            for b, s in reversed(tail):  # oldest first
                if after < b <= upto and (snapshot_id is None or s != snapshot_id):
                    return b
            return None
        state = self.state(table)
        if state is None:
            return None
        return history_repo.first_change(self.session, state.id, after, snapshot_id, upto)

