"""All SQL about expirations, approved snapshots and the table-row locks that order approvals
against hand-outs.

The locks, on PostgreSQL: an approval takes ``FOR UPDATE`` on its table row; every path that
hands out or leases a snapshot takes ``FOR KEY SHARE`` on the rows of the tables it answers
for. The two conflict, so an approval and a hand-out of the same table run one after the other
and the second sees what the first committed; hand-outs do not block each other, and ``KEY
SHARE`` does not conflict with the ``UPDATE`` of ``latest(T)`` by a commit. On SQLite every
write transaction holds the database write lock (``BEGIN IMMEDIATE``), which orders them too.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import and_, or_, select, tuple_
from sqlalchemy.orm import Session

from metaservice.db import locks
from metaservice.db.models import (
    BarrierRow,
    ExpirationRow,
    JobRow,
    JobTableRow,
    SnapshotExpirationRow,
    TableRow,
)

# Row-value IN lists are chunked to keep statements (and SQLite's variable count) small.
_CHUNK = 400


def lock_table_for_approval(session: Session, table_id: int) -> TableRow | None:
    """The table row, locked exclusively (``FOR UPDATE``) and re-read."""
    return locks.lock_table(session, table_id)


def hold_tables(session: Session, table_ids: Iterable[int]) -> None:
    """Share-lock the table rows (``FOR KEY SHARE``, by id): an approval of any of these tables
    waits for this transaction, and this one waits for an approval in progress."""
    locks.share_tables(session, table_ids)


def _pairs_clause(pairs: list[tuple[int, int]]):  # type: ignore[no-untyped-def]
    if len(pairs) <= 8:
        return or_(*[and_(SnapshotExpirationRow.table_id == t,
                          SnapshotExpirationRow.snapshot_id == s) for t, s in pairs])
    return tuple_(SnapshotExpirationRow.table_id, SnapshotExpirationRow.snapshot_id).in_(pairs)


def approved_among(session: Session, pairs: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """Which ``(table_id, snapshot_id)`` pairs are approved for expiration (or expired)."""
    wanted = list(dict.fromkeys(pairs))
    found: set[tuple[int, int]] = set()
    for start in range(0, len(wanted), _CHUNK):
        chunk = wanted[start:start + _CHUNK]
        found.update(session.execute(
            select(SnapshotExpirationRow.table_id, SnapshotExpirationRow.snapshot_id)
            .where(_pairs_clause(chunk))
        ).tuples())
    return found


def snapshot_expirations(session: Session, table_id: int,
                         snapshot_ids: Iterable[int]) -> dict[int, SnapshotExpirationRow]:
    ids = list(set(snapshot_ids))
    found: dict[int, SnapshotExpirationRow] = {}
    for start in range(0, len(ids), _CHUNK):
        found.update((r.snapshot_id, r) for r in session.scalars(
            select(SnapshotExpirationRow).where(
                SnapshotExpirationRow.table_id == table_id,
                SnapshotExpirationRow.snapshot_id.in_(ids[start:start + _CHUNK]))))
    return found


def expiration_snapshots(session: Session, expiration_id: str) -> list[SnapshotExpirationRow]:
    return list(session.scalars(
        select(SnapshotExpirationRow)
        .where(SnapshotExpirationRow.expiration_id == expiration_id)
        .order_by(SnapshotExpirationRow.snapshot_id)))


def recorded_snapshots(session: Session, table_id: int, snapshot_ids: Iterable[int], *,
                       include_rolled_back: bool) -> dict[int, int]:
    """``{snapshot_id: greatest barrier it completes}`` for the snapshots of the table that
    complete some barrier."""
    ids = list(set(snapshot_ids))
    found: dict[int, int] = {}
    for start in range(0, len(ids), _CHUNK):
        stmt = (select(BarrierRow.snapshot_id, BarrierRow.barrier)
                .where(BarrierRow.table_id == table_id,
                       BarrierRow.snapshot_id.in_(ids[start:start + _CHUNK])))
        if not include_rolled_back:
            stmt = stmt.where(BarrierRow.rolled_back.is_(False))
        for snapshot_id, barrier in session.execute(stmt):
            found[snapshot_id] = max(barrier, found.get(snapshot_id, barrier))
    return found


def recorded_pairs(session: Session, pairs: Iterable[tuple[int, int]]) -> set[tuple[int, int]]:
    """Which ``(table_id, snapshot_id)`` pairs complete a barrier not rolled back."""
    by_table: dict[int, list[int]] = {}
    for table_id, snapshot_id in pairs:
        by_table.setdefault(table_id, []).append(snapshot_id)
    return {(t, s) for t, ids in by_table.items()
            for s in recorded_snapshots(session, t, ids, include_rolled_back=False)}


def running_readers(session: Session, table_id: int) -> list[JobRow]:
    """The running jobs that read the table, by name."""
    return list(session.scalars(
        select(JobRow).join(JobTableRow, JobTableRow.job_name == JobRow.name)
        .where(JobTableRow.table_id == table_id, JobTableRow.role == "source",
               JobRow.state == "running")
        .order_by(JobRow.name)))


def barriers_from(session: Session, table_id: int, barrier: int) -> list[BarrierRow]:
    """The table's barriers ≥ ``barrier`` that are not rolled back, oldest first."""
    return list(session.scalars(
        select(BarrierRow).where(BarrierRow.table_id == table_id, BarrierRow.barrier >= barrier,
                                 BarrierRow.rolled_back.is_(False))
        .order_by(BarrierRow.barrier)))


def earliest_retained(session: Session, table_id: int) -> BarrierRow | None:
    """The table's earliest barrier (not rolled back) whose snapshot is not approved for
    expiration."""
    approved = select(SnapshotExpirationRow.snapshot_id).where(
        SnapshotExpirationRow.table_id == table_id)
    return session.scalars(
        select(BarrierRow)
        .where(BarrierRow.table_id == table_id, BarrierRow.rolled_back.is_(False),
               BarrierRow.snapshot_id.not_in(approved))
        .order_by(BarrierRow.barrier).limit(1)).first()


def add_expiration(session: Session, expiration: ExpirationRow) -> None:
    session.add(expiration)
    session.flush()


def get_expiration(session: Session, expiration_id: str) -> ExpirationRow | None:
    return session.get(ExpirationRow, expiration_id)
