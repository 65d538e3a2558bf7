"""Two-phase expiration (docs/contract.md#two-phase-expiration).

1. *Approve*: a maintenance tool proposes snapshots of one table; under the table's row lock
   each is approved unless a rule protects it (``protection.py``). From that commit on, an
   approved snapshot is never handed out or leased again (``handout.py``).
2. *Complete*: the tool deleted some of them from Iceberg and reports which; they become
   ``expired``. The others stay approved (never handed out again: the tool may have deleted
   part of their files) and a later expiration may approve them again.

A refusal names its reason: ``latest``, ``strong_cut``, ``job_source:<job>``,
``lease:<id>`` (in the list of protected snapshots, ``lease`` for a lease the caller may not
see), ``unknown`` (no barrier of the table records it; pass ``approve_unknown`` to
expire such snapshots anyway, for example the intermediate snapshots of an overwrite) or
``already_expired``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from metaservice import errors
from metaservice.auth.service import ANONYMOUS_ADMIN, Principal
from metaservice.context import ServiceContext
from metaservice.db.models import ExpirationRow, SnapshotExpirationRow, TableRow
from metaservice.names import TableName
from metaservice.repositories import expirations as repo
from metaservice.repositories import tables as tables_repo
from metaservice.retention.leases import service as leases
from metaservice.retention.protection import LEASE, Protected, protected_snapshots
from metaservice.retention.protection import lease as lease_reason

logger = logging.getLogger(__name__)

UNKNOWN = "unknown"
ALREADY_EXPIRED = "already_expired"


@dataclass(frozen=True)
class Refusal:
    snapshot_id: int
    reason: str
    reasons: tuple[str, ...]


@dataclass
class Approval:
    expiration_id: str
    table: str
    approved: list[int] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)


@dataclass
class ExpirationState:
    expiration_id: str
    table: str
    requested_at: int
    completed_at: int | None
    approved: list[int]
    expired: list[int]


def _table(session: Session, name: TableName) -> TableRow:
    row = tables_repo.find_table(session, name)
    if row is None:
        raise errors.UnknownTableError.among([str(name)], tables_repo.qualified_names(session))
    return row


def request_expiration(session: Session, ctx: ServiceContext, name: TableName,
                       snapshot_ids: Sequence[int], *, approve_unknown: bool = False) -> Approval:
    """Phase one: approve every proposed snapshot that nothing protects."""
    table = repo.lock_table_for_approval(session, _table(session, name).id)
    assert table is not None
    now = ctx.clock.now_ms()
    wanted = list(dict.fromkeys(int(s) for s in snapshot_ids))
    protected = protected_snapshots(session, ctx, table, now)
    recorded = repo.recorded_snapshots(session, table.id, wanted, include_rolled_back=True)
    earlier = repo.snapshot_expirations(session, table.id, wanted)
    expiration = ExpirationRow(id=str(uuid.uuid4()), table_id=table.id, requested_at=now)
    repo.add_expiration(session, expiration)
    result = Approval(expiration.id, str(name))
    for snapshot_id in wanted:
        previous = earlier.get(snapshot_id)
        if previous is not None and previous.state == "expired":
            result.refused.append(Refusal(snapshot_id, ALREADY_EXPIRED, (ALREADY_EXPIRED,)))
        elif snapshot_id in protected:
            reasons = tuple(protected[snapshot_id].reasons)
            result.refused.append(Refusal(snapshot_id, reasons[0], reasons))
        elif previous is not None:  # approved by an earlier expiration: this one takes it over
            previous.expiration_id, previous.approved_at = expiration.id, now
            result.approved.append(snapshot_id)
        elif snapshot_id not in recorded and not approve_unknown:
            result.refused.append(Refusal(snapshot_id, UNKNOWN, (UNKNOWN,)))
        else:
            session.add(SnapshotExpirationRow(table_id=table.id, snapshot_id=snapshot_id,
                                              expiration_id=expiration.id, state="approved",
                                              approved_at=now))
            result.approved.append(snapshot_id)
    session.flush()
    logger.info("expiration_approved", extra={
        "expiration_id": expiration.id, "table": str(name), "approved": len(result.approved),
        "refused": len(result.refused)})
    return result


def complete_expiration(session: Session, ctx: ServiceContext, expiration_id: str,
                        snapshot_ids: Sequence[int]) -> ExpirationState:
    """Phase two: the snapshots the tool really deleted become ``expired``. Repeatable."""
    expiration = _expiration(session, expiration_id)
    repo.lock_table_for_approval(session, expiration.table_id)
    now = ctx.clock.now_ms()
    wanted = list(dict.fromkeys(int(s) for s in snapshot_ids))
    rows = repo.snapshot_expirations(session, expiration.table_id, wanted)
    not_approved = [s for s in wanted if s not in rows]
    if not_approved:
        raise errors.SnapshotNotApprovedError(
            f"{len(not_approved)} snapshot(s) reported as expired were never approved for "
            "expiration", expiration_id=expiration_id, snapshot_ids=not_approved)
    for row in rows.values():
        if row.state == "approved":
            row.state, row.expired_at = "expired", now
    if expiration.completed_at is None:
        expiration.completed_at = now
    session.flush()
    logger.info("expiration_completed", extra={"expiration_id": expiration_id,
                                               "expired": len(wanted)})
    return expiration_state(session, expiration_id)


def _expiration(session: Session, expiration_id: str) -> ExpirationRow:
    expiration = repo.get_expiration(session, expiration_id)
    if expiration is None:
        raise errors.UnknownExpirationError(f"unknown expiration {expiration_id!r}",
                                            expiration_id=expiration_id)
    return expiration


def expiration_state(session: Session, expiration_id: str) -> ExpirationState:
    expiration = _expiration(session, expiration_id)
    table = tables_repo.tables_by_id(session, [expiration.table_id])[expiration.table_id]
    rows = repo.expiration_snapshots(session, expiration_id)
    return ExpirationState(
        expiration.id, table.qualified_name, expiration.requested_at, expiration.completed_at,
        approved=[r.snapshot_id for r in rows if r.state == "approved"],
        expired=[r.snapshot_id for r in rows if r.state == "expired"])


def list_protected(session: Session, ctx: ServiceContext, name: TableName,
                   principal: Principal = ANONYMOUS_ADMIN) -> list[Protected]:
    """What is protected now and why, newest barrier first. A lease ``principal`` may not see
    (docs/contract.md#leases) is named ``lease``, without its id."""
    table = _table(session, name)
    found = protected_snapshots(session, ctx, table, ctx.clock.now_ms())
    prefix = lease_reason("")
    hidden = leases.hidden_leases(session, sorted(
        {r[len(prefix):] for p in found.values() for r in p.reasons if r.startswith(prefix)}),
        principal)
    for p in found.values():
        p.reasons = [LEASE if r.startswith(prefix) and r[len(prefix):] in hidden else r
                     for r in p.reasons]
    missing = [p.snapshot_id for p in found.values() if p.barrier is None]
    if missing:
        barriers = repo.recorded_snapshots(session, table.id, missing, include_rolled_back=False)
        for snapshot_id in missing:
            found[snapshot_id].barrier = barriers.get(snapshot_id)
    return sorted(found.values(), key=lambda p: (-(p.barrier or 0), p.snapshot_id))
