"""All SQL about leases."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import ColumnElement, case, delete, exists, func, or_, select, text, update
from sqlalchemy.orm import Session

from metaservice.db.engine import on_postgres
from metaservice.db.models import (
    LeaseRow,
    LeaseSnapshotRow,
    ReadSessionRow,
    ScanPlanRow,
    TableRow,
)
from metaservice.names import qualified


def add_lease(session: Session, lease: LeaseRow, snapshots: Iterable[tuple[int, int]]) -> None:
    session.add(lease)
    session.flush()
    session.add_all(LeaseSnapshotRow(lease_id=lease.id, table_id=t, snapshot_id=s)
                    for t, s in sorted(set(snapshots)))
    session.flush()


def add_snapshots(session: Session, lease_id: str, snapshots: Iterable[tuple[int, int]]) -> None:
    """Add ``(table_id, snapshot_id)`` pairs the lease does not hold yet."""
    wanted = set(snapshots)
    if not wanted:
        return
    held = set(session.execute(
        select(LeaseSnapshotRow.table_id, LeaseSnapshotRow.snapshot_id)
        .where(LeaseSnapshotRow.lease_id == lease_id,
               LeaseSnapshotRow.table_id.in_({t for t, _ in wanted}))).tuples())
    session.add_all(LeaseSnapshotRow(lease_id=lease_id, table_id=t, snapshot_id=s)
                    for t, s in sorted(wanted - held))
    session.flush()


def get_lease(session: Session, lease_id: str, *, for_update: bool = False) -> LeaseRow | None:
    stmt = select(LeaseRow).where(LeaseRow.id == lease_id)
    if for_update:
        stmt = stmt.with_for_update().execution_options(populate_existing=True)
    return session.scalars(stmt).first()


def lease_snapshots(session: Session,
                    lease_ids: Iterable[str]) -> dict[str, list[tuple[str, int, int]]]:
    """``{lease_id: [(table name, table_id, snapshot_id), ...]}``."""
    ids = list(set(lease_ids))
    result: dict[str, list[tuple[str, int, int]]] = {i: [] for i in ids}
    if not ids:
        return result
    rows = session.execute(
        select(LeaseSnapshotRow.lease_id, LeaseSnapshotRow.table_id, LeaseSnapshotRow.snapshot_id,
               TableRow.catalog, TableRow.database, TableRow.name)
        .join(TableRow, TableRow.id == LeaseSnapshotRow.table_id)
        .where(LeaseSnapshotRow.lease_id.in_(ids))
        .order_by(TableRow.catalog, TableRow.database, TableRow.name, LeaseSnapshotRow.snapshot_id)
    ).all()
    for lease_id, table_id, snapshot_id, c, d, t in rows:
        result[lease_id].append((qualified(c, d, t), table_id, snapshot_id))
    return result


def delete_lease(session: Session, lease_id: str) -> bool:
    session.execute(delete(LeaseSnapshotRow).where(LeaseSnapshotRow.lease_id == lease_id))
    result = session.execute(delete(LeaseRow).where(LeaseRow.id == lease_id))
    return getattr(result, "rowcount", 0) == 1


def purge_expired(session: Session, expired_before_ms: int, *, limit: int = 500) -> int:
    """Forget up to ``limit`` leases that expired before ``expired_before_ms``. Rows another
    transaction is purging are skipped (PostgreSQL ``SKIP LOCKED``): purges never wait on each
    other."""
    ids = list(session.scalars(
        select(LeaseRow.id).where(LeaseRow.expires_at < expired_before_ms)
        .order_by(LeaseRow.id).limit(limit).with_for_update(skip_locked=True)))
    if ids:
        session.execute(delete(LeaseSnapshotRow).where(LeaseSnapshotRow.lease_id.in_(ids)))
        session.execute(delete(LeaseRow).where(LeaseRow.id.in_(ids)))
    return len(ids)


def _holds_something() -> ColumnElement[bool]:
    """A lease that holds a snapshot, or is a read session's (which may hold none yet): one
    that does not held only snapshots of tables since dropped, and has ended with them."""
    return or_(exists().where(LeaseSnapshotRow.lease_id == LeaseRow.id),
               exists().where(ReadSessionRow.id == LeaseRow.id))


def ended_with_its_tables(session: Session, lease_id: str) -> bool:
    """Whether the lease exists but every table it held was dropped
    (docs/contract.md#the-built-in-catalog: a drop ends the table's leases)."""
    return bool(session.scalar(select(LeaseRow.id).where(
        LeaseRow.id == lease_id, ~_holds_something())))


def live_leases(session: Session, now_ms: int, *, table_id: int | None = None,
                holder: str | None = None, principal: str | None = None,
                limit: int = 1000) -> list[LeaseRow]:
    """Leases not yet expired (nor ended with their tables), soonest to expire first; of one
    principal when given."""
    stmt = select(LeaseRow).where(LeaseRow.expires_at > now_ms, _holds_something())
    if principal is not None:
        stmt = stmt.where(LeaseRow.principal == principal)
    if holder is not None:
        stmt = stmt.where(LeaseRow.holder == holder)
    if table_id is not None:
        stmt = stmt.where(LeaseRow.id.in_(
            select(LeaseSnapshotRow.lease_id).where(LeaseSnapshotRow.table_id == table_id)))
    return list(session.scalars(stmt.order_by(LeaseRow.expires_at, LeaseRow.id).limit(limit)))


def live_leased_snapshots(session: Session, table_id: int, now_ms: int) -> list[tuple[int, str]]:
    """``(snapshot_id, lease_id)`` of every live lease on the table."""
    return list(session.execute(
        select(LeaseSnapshotRow.snapshot_id, LeaseSnapshotRow.lease_id)
        .join(LeaseRow, LeaseRow.id == LeaseSnapshotRow.lease_id)
        .where(LeaseSnapshotRow.table_id == table_id, LeaseRow.expires_at > now_ms)
        .order_by(LeaseRow.expires_at.desc(), LeaseSnapshotRow.lease_id)
    ).tuples())


def principals_of(session: Session, lease_ids: Iterable[str]) -> dict[str, str | None]:
    """``{lease_id: principal}`` of the leases that exist."""
    ids = list(set(lease_ids))
    if not ids:
        return {}
    rows = session.execute(select(LeaseRow.id, LeaseRow.principal).where(LeaseRow.id.in_(ids)))
    return {lease_id: principal for lease_id, principal in rows}


def extend_if_live(session: Session, lease_id: str, now_ms: int, until_ms: int) -> bool:
    """Move the lease's expiry to ``until_ms`` (unless it is later already) if the lease is
    still there and live when the statement runs; False otherwise. Needs no lock on the row:
    the check and the write are one statement."""
    result = session.execute(
        update(LeaseRow).where(LeaseRow.id == lease_id, LeaseRow.expires_at > now_ms)
        .values(expires_at=case((LeaseRow.expires_at > until_ms, LeaseRow.expires_at),
                                else_=until_ms))
        .execution_options(synchronize_session=False))
    return bool(result.rowcount)  # type: ignore[attr-defined]


def lock_leases_of(session: Session, principal: str | None) -> None:
    """Serialise the granting of one principal's leases (their count is capped): on PostgreSQL
    a transaction-scoped advisory lock per principal, taken before any table row (it is no row
    of the lock order, ``db/locks.py``); SQLite's write lock serialises every writer already."""
    if on_postgres(session):
        session.execute(text("SELECT pg_advisory_xact_lock(:a, hashtext(:p))"),
                        {"a": _LEASES_LOCK, "p": principal or ""})


_LEASES_LOCK = 0x4D534C  # "MSL"


def count_live_leases(session: Session, principal: str | None, now_ms: int) -> int:
    """The principal's live leases, read sessions' and scan plans' left out (they have caps of
    their own), and so are leases that ended with their tables."""
    return session.scalar(
        select(func.count()).select_from(LeaseRow)
        .where(LeaseRow.principal.is_(None) if principal is None
               else LeaseRow.principal == principal,
               LeaseRow.expires_at > now_ms,
               exists().where(LeaseSnapshotRow.lease_id == LeaseRow.id),
               ~exists().where(ReadSessionRow.id == LeaseRow.id),
               ~exists().where(ScanPlanRow.id == LeaseRow.id))) or 0
