"""What a rollback of table T at barrier B touches, as pure functions over plain data.

- The **affected tables**: T, every table downstream of T through running jobs, and — when a
  running job writes T — that job's other sinks and their downstream tables too: the writer
  restarts from B, so everything it wrote after B is rewritten.
- Each affected table X goes back to ``snap(X, B)`` (its *target*); its barriers above B become
  invalid.
- The **mode** is ``incremental`` when every target snapshot still exists in Iceberg (it was
  never approved for expiration), ``full`` otherwise, or when some table has no snapshot at or
  before B at all: that table must be rebuilt from scratch.
- Every affected running job restarts after ``restart_after``: the greatest barrier left in
  all its sinks (the min of their targets' barriers), never above what it had committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from metaservice.core.graph import Topology

REVISED, REWRITTEN, DOWNSTREAM = "revised", "rewritten", "downstream"


@dataclass(frozen=True)
class Snap:
    barrier: int
    snapshot_id: int


@dataclass(frozen=True)
class TableFacts:
    name: str
    relation: str
    distance: int
    current: Snap | None
    target: Snap | None
    expiration_state: str | None  # "approved" or "expired" when the target was expired
    invalid: tuple[int, ...]
    invalid_count: int

    @property
    def unavailable_reason(self) -> str | None:
        """Why the table cannot be rolled back to its target snapshot, if it cannot."""
        if self.target is None:
            return "no snapshot completes a barrier at or before the rollback barrier"
        if self.expiration_state is not None:
            return (f"target snapshot {self.target.snapshot_id} was {self.expiration_state} "
                    "for expiration")
        return None


@dataclass(frozen=True)
class JobFacts:
    name: str
    sinks: frozenset[str]
    last_committed: int | None
    pinned: int | None


@dataclass(frozen=True)
class Affected:
    tables: dict[str, tuple[str, int]]  # name → (relation, distance)
    jobs: frozenset[str]


def affected_by(topology: Topology, table: str) -> Affected:
    starts = {table}
    jobs: set[str] = set()
    for writer in topology.writers_of(table):
        jobs.add(writer)
        starts |= topology.jobs[writer].sinks
    distances: dict[str, int] = {}
    for start in starts:
        hood = topology.downstream(start)
        jobs |= hood.jobs
        for name, distance in hood.tables.items():
            distances[name] = min(distance, distances.get(name, distance))
    relations = {name: (REVISED if name == table else REWRITTEN if name in starts else DOWNSTREAM,
                        distance) for name, distance in distances.items()}
    return Affected(relations, frozenset(jobs))


def choose_mode(tables: Iterable[TableFacts]) -> tuple[str, str | None]:
    """``("incremental", None)`` or ``("full", reason)``."""
    reasons = [f"{t.name}: {t.unavailable_reason}" for t in sorted(tables, key=lambda t: t.name)
               if t.unavailable_reason is not None]
    if not reasons:
        return "incremental", None
    return "full", "; ".join(reasons)


def restart_after(job: JobFacts, targets: Mapping[str, Snap | None]) -> int | None:
    """The barrier the job restarts after: the greatest barrier left in all its sinks, never
    above what it had committed; None: from its start position (nothing of it is left)."""
    if job.last_committed is None:
        return None
    left = [job.last_committed]
    for sink in job.sinks:
        if sink in targets:
            target = targets[sink]
            if target is None:
                return None
            left.append(target.barrier)
    return min(left)


def must_restart(job: JobFacts, barrier: int) -> bool:
    return job.last_committed is not None and job.last_committed > barrier


def aborted_barrier(job: JobFacts, barrier: int) -> int | None:
    """The barrier the job's next answer aborts: the one it holds (any in-flight work of an
    affected job is discarded, so nothing reaches a fenced table), else the newest barrier it
    committed above the rollback barrier."""
    if job.pinned is not None:
        return job.pinned
    if must_restart(job, barrier):
        return job.last_committed
    return None
