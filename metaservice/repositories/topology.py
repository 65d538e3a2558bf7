"""All SQL about the topology: the running jobs' edges and the topology lock."""

from __future__ import annotations

import threading

from sqlalchemy import select
from sqlalchemy.orm import Session

from metaservice.core.graph import JobEdges, Topology
from metaservice.db import locks
from metaservice.db.models import JobRow, JobTableRow, TableRow, TopologyState
from metaservice.names import qualified


def lock_topology(session: Session) -> int:
    """Take the topology lock and bump its version (``db/locks.py``: :func:`change_topology`)."""
    return locks.change_topology(session)


_VERSION = select(TopologyState.version).where(TopologyState.id == 1)  # read on every answer


def topology_version(session: Session) -> int:
    return session.scalar(_VERSION) or 0


def load_running_topology(session: Session) -> Topology:
    rows = session.execute(
        select(JobTableRow.job_name, JobTableRow.role, TableRow.catalog, TableRow.database,
               TableRow.name)
        .join(JobRow, JobRow.name == JobTableRow.job_name)
        .join(TableRow, TableRow.id == JobTableRow.table_id)
        .where(JobRow.state == "running")
    ).all()
    sources: dict[str, set[str]] = {}
    sinks: dict[str, set[str]] = {}
    for job, role, catalog, database, name in rows:
        table = qualified(catalog, database, name)
        sources.setdefault(job, set())
        sinks.setdefault(job, set())
        (sources if role == "source" else sinks)[job].add(table)
    return Topology(
        JobEdges(job, frozenset(sources[job]), frozenset(sinks[job])) for job in sources
    )


class TopologyCache:
    """The running topology, reloaded only when the topology version changes. Safe to share
    between threads; each server process has its own and they agree through the version row."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version: int | None = None
        self._topology: Topology | None = None

    def get(self, session: Session, version: int | None = None) -> Topology:
        """The topology at ``version`` when the caller read it in this transaction, else at
        the version read now."""
        if version is None:
            version = topology_version(session)
        with self._lock:
            if self._version == version and self._topology is not None:
                return self._topology
        topology = load_running_topology(session)
        with self._lock:
            self._version, self._topology = version, topology
        return topology
