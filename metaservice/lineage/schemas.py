from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class TableNode(BaseModel):
    table: str
    latest_barrier: int | None = None
    writer_job: str | None = None
    distance: int | None = None


class JobNode(BaseModel):
    job: str
    sources: list[str]
    sinks: list[str]


class EdgeOut(BaseModel):
    source: str
    job: str
    sink: str


class LineageOut(BaseModel):
    tables: list[TableNode]
    jobs: list[JobNode]
    edges: list[EdgeOut]


class TableLineageOut(LineageOut):
    table: str
    direction: Literal["upstream", "downstream", "both"]
    depth: int | None


class SnapshotLineage(BaseModel):
    """Which snapshot of ``table`` completes ``barrier`` and, when a job wrote it, exactly which
    source snapshots that job read (recursively, through every job upstream)."""

    table: str
    requested_barrier: int
    barrier: int
    snapshot_id: int
    writer_job: str | None
    inputs: list[SnapshotLineage]
