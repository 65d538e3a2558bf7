"""The topology as a plain in-memory graph: cycles, components, upstream and downstream.

Pure code over plain data, so the rules are testable without HTTP or a database. Tables are
identified by their qualified name ``catalog.database.table``.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class JobEdges:
    """A job with the tables it reads and writes."""

    job: str
    sources: frozenset[str]
    sinks: frozenset[str]


@dataclass(frozen=True)
class Edge:
    source: str
    job: str
    sink: str


@dataclass
class Neighbourhood:
    """Tables reachable from a start table, with their distance in hops (jobs crossed)."""

    tables: dict[str, int] = field(default_factory=dict)
    jobs: set[str] = field(default_factory=set)
    edges: set[Edge] = field(default_factory=set)


class Topology:
    """An immutable snapshot of the running jobs' edges."""

    def __init__(self, jobs: Iterable[JobEdges], extra_tables: Iterable[str] = ()) -> None:
        self.jobs: dict[str, JobEdges] = {j.job: j for j in jobs}
        self._out: dict[str, list[Edge]] = defaultdict(list)
        self._in: dict[str, list[Edge]] = defaultdict(list)
        self.tables: set[str] = set(extra_tables)
        for j in self.jobs.values():
            self.tables |= j.sources | j.sinks
            for s in sorted(j.sources):
                for k in sorted(j.sinks):
                    edge = Edge(s, j.job, k)
                    self._out[s].append(edge)
                    self._in[k].append(edge)
        self._component_of: dict[str, frozenset[str]] | None = None
        self._writer_of: dict[str, JobEdges] = {k: j for j in self.jobs.values() for k in j.sinks}

    def with_job(self, job: JobEdges) -> Topology:
        """The topology if ``job`` were running too (replacing a job of the same name)."""
        others = [j for name, j in self.jobs.items() if name != job.job]
        return Topology([*others, job], self.tables)

    @property
    def edges(self) -> list[Edge]:
        return [e for edges in self._out.values() for e in edges]

    def writers_of(self, table: str) -> list[str]:
        return sorted(j.job for j in self.jobs.values() if table in j.sinks)

    def writer(self, table: str) -> JobEdges | None:
        """The running job writing ``table`` (at most one,
        docs/contract.md#one-writer-per-table)."""
        return self._writer_of.get(table)

    # -- cycles --------------------------------------------------------------------------

    def find_cycle(self) -> list[str] | None:
        """A cycle as an alternating path ``[table, job, table, …, table]`` (first == last), or
        None. A job that reads and writes the same table is a cycle of length one."""
        WHITE, GREY, BLACK = 0, 1, 2
        colour: dict[str, int] = defaultdict(int)
        for root in sorted(self.tables):
            if colour[root] != WHITE:
                continue
            # Iterative DFS keeping the path of edges taken.
            stack: list[tuple[str, int]] = [(root, 0)]
            path: list[Edge] = []
            colour[root] = GREY
            while stack:
                node, index = stack[-1]
                out = self._out.get(node, [])
                if index < len(out):
                    stack[-1] = (node, index + 1)
                    edge = out[index]
                    if colour[edge.sink] == GREY:
                        return _cycle_path(path, edge)
                    if colour[edge.sink] == WHITE:
                        colour[edge.sink] = GREY
                        path.append(edge)
                        stack.append((edge.sink, 0))
                else:
                    colour[node] = BLACK
                    stack.pop()
                    if path:
                        path.pop()
        return None

    # -- components ----------------------------------------------------------------------

    def component(self, table: str) -> frozenset[str]:
        """All tables connected to ``table`` through running jobs, in either direction."""
        if self._component_of is None:
            self._component_of = self._components()
        return self._component_of.get(table, frozenset({table}))

    def _components(self) -> dict[str, frozenset[str]]:
        parent: dict[str, str] = {t: t for t in self.tables}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for j in self.jobs.values():
            members = sorted(j.sources | j.sinks)
            for other in members[1:]:
                a, b = find(members[0]), find(other)
                if a != b:
                    parent[a] = b
        groups: dict[str, set[str]] = defaultdict(set)
        for t in self.tables:
            groups[find(t)].add(t)
        result: dict[str, frozenset[str]] = {}
        for members_set in groups.values():
            frozen = frozenset(members_set)
            for t in frozen:
                result[t] = frozen
        return result

    # -- traversal -----------------------------------------------------------------------

    def upstream(self, table: str, depth: int | None = None) -> Neighbourhood:
        return self._walk(table, depth, self._in, lambda e: e.source)

    def downstream(self, table: str, depth: int | None = None) -> Neighbourhood:
        return self._walk(table, depth, self._out, lambda e: e.sink)

    def _walk(self, table: str, depth: int | None, adjacency: dict[str, list[Edge]],
              step) -> Neighbourhood:  # type: ignore[no-untyped-def]
        result = Neighbourhood(tables={table: 0})
        queue: deque[str] = deque([table])
        while queue:
            node = queue.popleft()
            distance = result.tables[node]
            if depth is not None and distance >= depth:
                continue
            for edge in adjacency.get(node, ()):
                result.jobs.add(edge.job)
                result.edges.add(edge)
                nxt = step(edge)
                if nxt not in result.tables:
                    result.tables[nxt] = distance + 1
                    queue.append(nxt)
        return result


def _cycle_path(path: list[Edge], closing: Edge) -> list[str]:
    start = closing.sink
    edges = [*path, closing]
    # Keep only the part of the DFS path that starts at the re-entered table.
    for i, e in enumerate(edges):
        if e.source == start:
            edges = edges[i:]
            break
    result = [start]
    for e in edges:
        result += [e.job, e.sink]
    return result
