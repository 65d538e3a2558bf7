"""The rule every path that hands out or leases a snapshot follows
(docs/contract.md#expired-snapshots-stay-gone): a snapshot approved for expiration is never handed
out or leased again.

A path that *commits to* snapshots (a lease, a pinned barrier) first calls :func:`hold` on
their tables, then checks with :func:`refuse_approved` / :func:`approved` (a pinned barrier
reads the same check in the statement that reads its snapshots, ``repositories/barriers.py``'s
``pin_reads``, and refuses with :func:`raise_expired`): the hold orders it
against approvals of those tables (see ``expirations/repository.py``), so either the approval
comes first and the check sees it, or the hand-out comes first and the approval sees the lease
or the pin.
A plain version read holds nothing: it only checks, and a snapshot it answers is protected for
the reader only if the request asked for a lease.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session

from metaservice import errors
from metaservice.db.models import BarrierRow
from metaservice.repositories import expirations as repo


def hold(session: Session, table_ids: Iterable[int]) -> None:
    """Order this transaction against approvals of these tables (call before checking)."""
    repo.hold_tables(session, table_ids)


def approved(session: Session, pairs: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """The ``(table_id, snapshot_id)`` pairs approved for expiration."""
    return repo.approved_among(session, pairs)


def refuse_approved(session: Session, snapshots: Iterable[tuple[str, int, int]]) -> None:
    """Raise :class:`~metaservice.errors.SnapshotExpiredError` (410) when one of the
    ``(table name, table_id, snapshot_id)`` is approved for expiration."""
    wanted = list(snapshots)
    gone = approved(session, ((t, s) for _, t, s in wanted))
    if not gone:
        return
    raise_expired([{"table": name, "snapshot_id": s} for name, t, s in wanted if (t, s) in gone])


def raise_expired(expired: Sequence[Mapping[str, Any]]) -> None:
    """Raise the 410 naming the snapshots (``{"table", "snapshot_id"}``) approved for
    expiration."""
    raise errors.SnapshotExpiredError.approved(expired)


SNAPSHOT_EXPIRED = "snapshot_expired"
"""The ``reason`` of a ``wait`` answer whose barrier would have handed out an approved snapshot."""


def earliest_retained(session: Session, table_id: int) -> BarrierRow | None:
    """The table's earliest barrier whose snapshot is not approved for expiration (where a job
    started from ``earliest`` can begin)."""
    return repo.earliest_retained(session, table_id)
