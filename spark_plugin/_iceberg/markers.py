"""How a commit says which job and barrier it completes, and how a replay finds it.

A sink commit's snapshot summary carries ``metaservice.job`` and ``metaservice.barrier``; a root
ingestion commit carries ``metaservice.root-label`` (the ingestion's label) and
``metaservice.barrier`` — not ``metaservice.job``: a root is written by no registered job, and
MetaService's catalog takes a commit naming a job for that job's barrier commit
(docs/contract.md#commits-through-the-catalog). The same metadata update sets the table property
``metaservice.sink.<job or label>.last-barrier``, which survives the expiration of the tagged
snapshot.

A replay (a crash, a restarted query, a zombie writer) looks for its tag on the table's current
lineage first (a rollback of the table leaves the property ahead of the data), then at the
property (histories shortened by snapshot expiration).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

JOB_PROPERTY = "metaservice.job"
"""Snapshot summary key: the job that committed the snapshot."""
BARRIER_PROPERTY = "metaservice.barrier"
"""Snapshot summary key: the barrier the snapshot completes."""
ROOT_LABEL_PROPERTY = "metaservice.root-label"
"""Snapshot summary key: the label of the root ingestion that committed the snapshot. Root
commits made before this key existed carry the label in ``metaservice.job``; both are read."""


def marker_property(job: str) -> str:
    """The table property recording the last barrier ``job`` (or root label) committed."""
    return f"metaservice.sink.{job}.last-barrier"


def ancestors(metadata: TableMetadata, snapshot_id: int | None) -> Iterator[Snapshot]:
    """The snapshot ``snapshot_id`` and its retained ancestors, newest first."""
    current = None if snapshot_id is None else metadata.snapshot_by_id(snapshot_id)
    while current is not None:
        yield current
        parent = current.parent_snapshot_id
        current = None if parent is None else metadata.snapshot_by_id(parent)


def _summary_get(snapshot: Snapshot, key: str) -> str | None:
    summary = snapshot.summary
    return None if summary is None else summary.get(key)


def committer(snapshot: Snapshot) -> str | None:
    """The job or root label that tagged ``snapshot`` (``None`` when untagged)."""
    return _summary_get(snapshot, JOB_PROPERTY) or _summary_get(snapshot, ROOT_LABEL_PROPERTY)


@dataclass(frozen=True)
class LastCommit:
    """The last barrier a job committed to a table on its current lineage.

    ``snapshot_id`` is ``None`` when only the table property knows it (the tagged snapshot is no
    longer retained).
    """

    barrier: int
    snapshot_id: int | None


def last_commit_of(metadata: TableMetadata, job: str) -> LastCommit | None:
    """The newest snapshot committed by ``job`` (a job id or a root label) among the current
    snapshot's ancestors; else the table property ``metaservice.sink.<job>.last-barrier``
    (history expired); else ``None``."""
    current = metadata.current_snapshot()
    for snapshot in ancestors(metadata, None if current is None else current.snapshot_id):
        if committer(snapshot) == job:
            barrier = _summary_get(snapshot, BARRIER_PROPERTY)
            if barrier is not None:
                return LastCommit(int(barrier), snapshot.snapshot_id)
    marker = metadata.properties.get(marker_property(job))
    if marker is not None:
        return LastCommit(int(marker), None)
    return None


def tagged_snapshots(metadata: TableMetadata) -> list[tuple[int, str, int]]:
    """``(snapshot_id, job or root label, barrier)`` of every tagged snapshot on the current
    lineage, oldest first."""
    current = metadata.current_snapshot()
    out = []
    for s in ancestors(metadata, None if current is None else current.snapshot_id):
        job, barrier = committer(s), _summary_get(s, BARRIER_PROPERTY)
        if job is not None and barrier is not None:
            out.append((s.snapshot_id, job, int(barrier)))
    return out[::-1]
