"""What a barrier or snapshot must satisfy before the protocol records or pins it.

- A barrier more than ``max_barrier_ahead_seconds`` ahead of the server's clock is refused
  (docs/contract.md#barriers, ``barrier_in_future``): a barrier near 2^63 would make every later
  assigned barrier (``latest(T) + 1``) overflow, and no real barrier would ever pass it again.
  Because every barrier a table completes passes this check (or is assigned, at most
  ``latest(T) + 1``), and the setting is capped far below 2^63 ms, ``latest(T) + 1`` always fits a
  signed 64-bit integer.
- A snapshot approved for expiration is never recorded as a table's latest again
  (docs/contract.md#expired-snapshots-stay-gone, 410 ``snapshot_expired``): it is being deleted from
  Iceberg.
"""

from __future__ import annotations

from metaservice import errors
from metaservice.barriers.repository import CommitChecks, LockedTable
from metaservice.context import ServiceContext


def refuse_barrier_in_future(ctx: ServiceContext, barrier: int | str | None) -> None:
    """Raise BarrierInFutureError when ``barrier`` (an int; a start keyword or None, for an
    assigned barrier, passes) is beyond the server's clock plus the configured bound."""
    if not isinstance(barrier, int) or isinstance(barrier, bool):
        return
    ahead_ms = int(ctx.settings.max_barrier_ahead_seconds * 1000)
    bound = ctx.clock.now_ms() + ahead_ms
    if barrier > bound:
        raise errors.BarrierInFutureError(
            f"barrier {barrier} is more than {ctx.settings.max_barrier_ahead_seconds:g} s ahead "
            "of the server's clock", barrier=barrier, max_barrier=bound,
            max_barrier_ahead_seconds=ctx.settings.max_barrier_ahead_seconds)


def refuse_expired_snapshot(table: LockedTable, checks: CommitChecks, snapshot_id: int) -> None:
    """Raise SnapshotExpiredError when ``snapshot_id`` of ``table`` (locked, so no approval can
    slip in before the commit) is approved for expiration and would be recorded. An exact repeat
    of a barrier already recorded with it records nothing and still answers as the first did."""
    if not checks.expiration_approved:
        return
    existing = checks.existing
    if existing is not None and not existing.rolled_back and existing.snapshot_id == snapshot_id:
        return
    raise errors.SnapshotExpiredError(
        f"snapshot {snapshot_id} of {table.name} is approved for expiration; it cannot become "
        "the table's latest", table=table.name, snapshot_id=snapshot_id)
