"""Which snapshots of a table must not be expired, and why (docs/contract.md#protected-snapshots).

A snapshot is protected, with one reason per rule that holds it:

- ``latest``: it completes ``latest(T)``;
- ``strong_cut``: it is ``snap(T, B_C)`` for the current strong cut ``B_C`` of T's component;
- ``job_source:<job>``: a running job reads T and the snapshot is one it holds or will read:
  its pinned snapshot and the one before it (``previous``), and every snapshot from
  ``snap(T, last committed barrier)`` up to the latest. The contract names the two ends; the
  snapshots between them are protected too, because the job's next step reads the rows appended
  between them by walking Iceberg's snapshot ancestry, which an expired snapshot in the middle
  would break;
- ``lease:<id>``: a live lease holds it (listed as ``lease`` to a caller who may not see that
  lease, docs/contract.md#leases).

Every rule reads only committed rows; the caller orders itself against commits, pins and leases
by locking the table row (``repositories/expirations.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from metaservice.context import ServiceContext
from metaservice.db.models import TableRow
from metaservice.repositories import expirations as repo
from metaservice.repositories import history as history_repo
from metaservice.repositories import leases as leases_repo
from metaservice.versions.service import strong_cut_of_component

LATEST = "latest"
STRONG_CUT = "strong_cut"
LEASE = "lease"


def job_source(job: str) -> str:
    return f"job_source:{job}"


def lease(lease_id: str) -> str:
    return f"{LEASE}:{lease_id}"


@dataclass
class Protected:
    snapshot_id: int
    reasons: list[str] = field(default_factory=list)
    barrier: int | None = None


def protected_snapshots(session: Session, ctx: ServiceContext, table: TableRow,
                        now_ms: int) -> dict[int, Protected]:
    """``{snapshot_id: Protected}`` for the table, in rule order (latest first)."""
    found: dict[int, Protected] = {}

    def protect(snapshot_id: int | None, reason: str, barrier: int | None = None) -> None:
        if snapshot_id is None:
            return
        entry = found.setdefault(snapshot_id, Protected(snapshot_id))
        if reason not in entry.reasons:
            entry.reasons.append(reason)
        if barrier is not None and (entry.barrier is None or barrier > entry.barrier):
            entry.barrier = barrier

    name = table.qualified_name
    protect(table.latest_snapshot_id, LATEST, table.latest_barrier)

    cut = strong_cut_of_component(session, ctx, name)
    if cut is not None:
        row = history_repo.snap(session, table.id, cut)
        if row is not None:
            protect(row.snapshot_id, STRONG_CUT, row.barrier)

    for job in repo.running_readers(session, table.id):
        reason = job_source(job.name)
        for held in ((job.pinned_snapshots or {}).get(name),
                     (job.pinned_previous or {}).get(name)):
            if held is not None:
                protect(int(held["snapshot_id"]), reason, int(held["barrier"]))
        floors = [int(held["barrier"]) for held in (
            (job.pinned_previous or {}).get(name), (job.pinned_snapshots or {}).get(name))
            if held is not None]
        if job.last_committed_barrier is not None:
            row = history_repo.snap(session, table.id, job.last_committed_barrier)
            if row is not None:
                floors.append(row.barrier)
        if floors:
            for row in repo.barriers_from(session, table.id, min(floors)):
                protect(row.snapshot_id, reason, row.barrier)

    for snapshot_id, lease_id in leases_repo.live_leased_snapshots(session, table.id, now_ms):
        protect(snapshot_id, lease(lease_id))
    return found
