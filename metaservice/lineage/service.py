"""Lineage answers: the topology and exact data lineage of a snapshot."""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from sqlalchemy.orm import Session

from metaservice import errors
from metaservice.context import ServiceContext
from metaservice.core.graph import Edge, Topology
from metaservice.lineage.schemas import SnapshotLineage
from metaservice.names import TableName
from metaservice.repositories import barriers as barriers_repo
from metaservice.repositories import history as history_repo
from metaservice.repositories import tables as tables_repo


def describe(session: Session, topology: Topology, tables: dict[str, int | None],
             jobs: set[str], edges: set[Edge]) -> tuple[list[dict[str, Any]],
                                                        list[dict[str, Any]],
                                                        list[dict[str, Any]]]:
    """Tables, jobs and edges as plain dicts, sorted. The answer model validates them in one
    pass: building thousands of models one by one cost more than the rest of GET /lineage."""
    facts = tables_repo.latest_and_writers(session, tables)
    nodes = []
    for name in sorted(tables):
        latest, writer = facts.get(name, (None, None))
        nodes.append({"table": name, "latest_barrier": latest, "writer_job": writer,
                      "distance": tables[name]})
    job_nodes = [{"job": j, "sources": sorted(topology.jobs[j].sources),
                  "sinks": sorted(topology.jobs[j].sinks)} for j in sorted(jobs)]
    edge_out = [{"source": e.source, "job": e.job, "sink": e.sink}
                for e in sorted(edges, key=attrgetter("source", "job", "sink"))]
    return nodes, job_nodes, edge_out


def require_known(session: Session, name: TableName) -> None:
    """Refuse a table the service has never heard of (``unknown_table``, with close names)."""
    if tables_repo.find_table(session, name) is None:
        raise errors.UnknownTableError.among([str(name)], tables_repo.qualified_names(session))


def snapshot_lineage(session: Session, ctx: ServiceContext, name: TableName, barrier: int,
                     *, max_depth: int = 64) -> SnapshotLineage:
    table = tables_repo.find_table(session, name)
    if table is None:
        raise errors.UnknownTableError.among([str(name)], tables_repo.qualified_names(session))
    result = _lineage_of(session, table.id, str(name), barrier, max_depth)
    if result is None:
        raise errors.NoVersionError(f"{name} has no snapshot at or before barrier {barrier}",
                                    table=str(name), barrier=barrier)
    return result


def _lineage_of(session: Session, table_id: int, name: str, barrier: int,
                depth_left: int) -> SnapshotLineage | None:
    row = history_repo.snap(session, table_id, barrier)
    if row is None:
        return None
    inputs: list[SnapshotLineage] = []
    if row.writer_job is not None and row.writer_run is not None and depth_left > 0:
        progress = barriers_repo.progress(session, row.writer_job, row.writer_run, row.barrier)
        if progress is not None:
            sources = tables_repo.find_tables(session,
                                              [TableName.parse(s) for s in progress.snapshots])
            for source_name, read in sorted(progress.snapshots.items()):
                source = sources.get(TableName.parse(source_name))
                if source is None:
                    continue
                child = _lineage_of(session, source.id, source_name, read["barrier"],
                                    depth_left - 1)
                if child is not None:
                    inputs.append(child)
    return SnapshotLineage(table=name, requested_barrier=barrier, barrier=row.barrier,
                           snapshot_id=row.snapshot_id, writer_job=row.writer_job, inputs=inputs)
