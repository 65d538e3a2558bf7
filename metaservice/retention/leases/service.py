"""The lease rules (docs/contract.md#leases).

- A lease holds snapshots that complete a barrier of their table (not rolled back); anything
  else is ``404 unknown_snapshot``. A snapshot approved for expiration cannot be leased
  (``410 snapshot_expired``).
- Its term comes from the service clock; an expired lease protects nothing, cannot be renewed
  (``410 lease_expired``) and is forgotten an hour after it expired (then ``404
  unknown_lease``). Renewal without a TTL grants the lease's original term again.
- Leases are bounded like read sessions (docs/contract.md#leases): a term (at creation or renewal)
  longer than ``METASERVICE_MAX_LEASE_SECONDS`` is refused (``422 lease_term_too_long``; a renewal
  without a TTL grants the original term, cut to that maximum), and a principal holding
  ``METASERVICE_MAX_LEASES`` live leases is refused another (``429 too_many_leases``, naming how
  to release one). The count and the new lease are one transaction under a per-principal lock
  (``repository.lock_leases_of``), so racing requests never take one lease more. A read
  session's lease is counted against ``METASERVICE_MAX_READ_SESSIONS`` instead, and lasts
  ``METASERVICE_READ_SESSION_SECONDS`` (``catalog/read_sessions/service.py``).
- A lease belongs to the principal (token) that took it, by ``POST /leases`` or by
  ``POST /versions`` with ``lease_seconds``: only that principal or an admin sees, renews or
  releases it. To anyone else it does not exist: ``404 unknown_lease``, absent from
  ``GET /leases``, and the protection it gives is listed without its id. With authentication
  off every caller is the same (anonymous admin) principal.
- A drop of a table ends its leases (docs/contract.md#the-built-in-catalog): the lease's snapshots
  of the table go with it (their rows cascade), and a lease left holding nothing is
  ``404 unknown_lease`` on every route, absent from ``GET /leases`` and not counted against its
  principal's cap; a lease that also holds other tables' snapshots goes on holding those. (The drop
  deletes no lease row: a renewal locks its lease before its tables, a drop its table first.)
- Creation, renewal and ``POST /versions`` with ``lease_seconds`` hold their tables' rows
  against approvals (``retention/handout.py``), so a lease and an approval of the same
  snapshot racing never both win, whichever server process runs them. A renewal also checks
  that none of its snapshots was approved: a server whose clock ran ahead may have seen the
  lease expired and approved one of them, and then the lease has lapsed.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from metaservice import errors
from metaservice.auth.policy import Role
from metaservice.auth.service import ANONYMOUS_ADMIN, Principal
from metaservice.context import ServiceContext
from metaservice.core.cuts import Consistency
from metaservice.db.models import LeaseRow
from metaservice.names import TableName
from metaservice.repositories import expirations as expirations_repo
from metaservice.repositories import leases as repo
from metaservice.repositories import tables as tables_repo
from metaservice.retention import handout
from metaservice.versions import service as versions

logger = logging.getLogger(__name__)

FORGET_EXPIRED_AFTER_MS = 3_600_000
DEFAULT_HOLDER = "anonymous"


@dataclass(frozen=True)
class LeasedSnapshot:
    table: str
    snapshot_id: int


@dataclass(frozen=True)
class Lease:
    lease_id: str
    holder: str
    created_at: int
    expires_at: int
    snapshots: tuple[LeasedSnapshot, ...]


def _ttl_ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


def _bounded_term(ctx: ServiceContext, seconds: float, asked: str) -> float:
    """``seconds`` when it is within ``METASERVICE_MAX_LEASE_SECONDS``.

    Raises:
        LeaseTermTooLongError: 422, a longer term (``asked`` names the field).
    """
    maximum = ctx.settings.max_lease_seconds
    if seconds > maximum:
        raise errors.LeaseTermTooLongError(
            f"{asked} {seconds:g} is longer than a lease's maximum term, {maximum:g} s "
            "(METASERVICE_MAX_LEASE_SECONDS): ask for at most that and renew the lease "
            "(POST /leases/<id>/renew) while you still read", **{asked: seconds},
            max_lease_seconds=maximum)
    return seconds


def _admit(session: Session, ctx: ServiceContext, principal: Principal) -> None:
    """Take the principal's lease lock (before any table's) and refuse a lease beyond its cap.

    Raises:
        TooManyLeasesError: 429, the principal holds ``METASERVICE_MAX_LEASES`` live leases.
    """
    cap = ctx.settings.max_leases
    repo.lock_leases_of(session, principal.name)
    if repo.count_live_leases(session, principal.name, ctx.clock.now_ms()) >= cap:
        who = "this server's callers (authentication is off) hold" if principal.name is None \
            else f"token {principal.name!r} holds"
        raise errors.TooManyLeasesError(
            f"{who} {cap} live leases already (METASERVICE_MAX_LEASES); release one "
            "with DELETE /leases/<id> (GET /leases lists them, soonest to expire first) or wait "
            "until one expires", limit=cap)


def _lease(row: LeaseRow, snapshots: Sequence[tuple[str, int, int]]) -> Lease:
    return Lease(row.id, row.holder, row.created_at, row.expires_at,
                 tuple(LeasedSnapshot(name, s) for name, _, s in snapshots))


def sees_every_lease(principal: Principal) -> bool:
    return principal.role >= Role.admin


def visible_to(row: LeaseRow, principal: Principal) -> bool:
    return may_see(row.principal, principal)


def may_see(owner: str | None, principal: Principal) -> bool:
    """Whether ``principal`` sees a lease taken by ``owner`` (``LeaseRow.principal``)."""
    return sees_every_lease(principal) or (owner is not None and owner == principal.name)


def _grant(session: Session, ctx: ServiceContext, holder: str, ttl_seconds: float,
           snapshots: Sequence[tuple[str, int, int]], principal: Principal) -> Lease:
    """Insert a lease on ``(table name, table_id, snapshot_id)`` already held and checked."""
    now = ctx.clock.now_ms()
    repo.purge_expired(session, now - FORGET_EXPIRED_AFTER_MS)
    ttl = _ttl_ms(ttl_seconds)
    row = LeaseRow(id=str(uuid.uuid4()), holder=holder, principal=principal.name,
                   created_at=now, ttl_ms=ttl, expires_at=now + ttl)
    repo.add_lease(session, row, [(t, s) for _, t, s in snapshots])
    logger.info("lease_granted", extra={"lease_id": row.id, "holder": holder,
                                        "snapshots": len(snapshots), "expires_at": row.expires_at})
    unique = sorted(set(snapshots))
    return _lease(row, unique)


def create_lease(session: Session, ctx: ServiceContext, holder: str, ttl_seconds: float,
                 snapshots: Sequence[tuple[TableName, int]],
                 principal: Principal = ANONYMOUS_ADMIN) -> Lease:
    """Lease the snapshots for ``ttl_seconds``, on behalf of ``principal``.

    Raises:
        LeaseTermTooLongError: 422, ``ttl_seconds`` beyond the maximum term.
        TooManyLeasesError: 429, the principal holds its cap of live leases.
    """
    _bounded_term(ctx, ttl_seconds, "ttl_seconds")
    _admit(session, ctx, principal)
    rows = tables_repo.find_tables(session, [t for t, _ in snapshots])
    unknown_tables = sorted({str(t) for t, _ in snapshots if t not in rows})
    if unknown_tables:
        raise errors.UnknownTableError.among(unknown_tables,
                                             tables_repo.qualified_names(session))
    wanted = sorted({(str(t), rows[t].id, int(s)) for t, s in snapshots})
    handout.hold(session, (t for _, t, _ in wanted))
    recorded = expirations_repo.recorded_pairs(session, ((t, s) for _, t, s in wanted))
    handout.refuse_approved(session, wanted)
    unknown = [{"table": n, "snapshot_id": s} for n, t, s in wanted if (t, s) not in recorded]
    if unknown:
        first = unknown[0]
        raise errors.UnknownSnapshotError(
            f"snapshot {first['snapshot_id']} of {first['table']} completes no barrier of the "
            "table; only snapshots recorded by MetaService can be leased", snapshots=unknown)
    return _grant(session, ctx, holder, ttl_seconds, wanted, principal)


def lease_versions(session: Session, ctx: ServiceContext, tables: Sequence[TableName],
                   consistency: Consistency | None, barrier: int | None, lease_seconds: float,
                   holder: str | None, principal: Principal = ANONYMOUS_ADMIN,
                   ) -> tuple[dict[str, versions.Version], Lease]:
    """Resolve versions and lease them in the same (write) transaction: nothing can be approved
    for expiration between the answer and the read. The lease belongs to ``principal``, and is
    bounded as :func:`create_lease`'s."""
    _bounded_term(ctx, lease_seconds, "lease_seconds")
    _admit(session, ctx, principal)
    rows = tables_repo.find_tables(session, tables)
    handout.hold(session, (r.id for r in rows.values()))
    answer = versions.resolve(session, ctx, tables, consistency, barrier)
    ids = {str(n): r.id for n, r in rows.items()}
    lease = _grant(session, ctx, holder or DEFAULT_HOLDER, lease_seconds,
                   [(n, ids[n], v.snapshot_id) for n, v in answer.items()], principal)
    return answer, lease


def open_read_session_lease(session: Session, ctx: ServiceContext, holder: str,
                            principal: Principal) -> Lease:
    """The lease of a new read session (``catalog/read_sessions/service.py``), holding nothing
    yet: it lasts ``METASERVICE_READ_SESSION_SECONDS`` and is capped with the principal's read
    sessions (the caller checks), not with its leases."""
    return _grant(session, ctx, holder, ctx.settings.read_session_seconds, [], principal)


def open_scan_plan_lease(session: Session, ctx: ServiceContext, holder: str,
                         snapshots: Sequence[tuple[str, int, int]],
                         principal: Principal) -> Lease:
    """The lease of a new scan plan of the catalog (``catalog/scan_plans/service.py``) on its
    planned ``(table name, table_id, snapshot_id)``: it lasts ``METASERVICE_SCAN_PLAN_SECONDS``
    and is capped with the principal's scan plans (the caller checks), not with its leases.

    Raises:
        SnapshotExpiredError: 410, a planned snapshot was approved for expiration.
    """
    handout.hold(session, (t for _, t, _ in snapshots))
    handout.refuse_approved(session, snapshots)
    return _grant(session, ctx, holder, ctx.settings.scan_plan_seconds, snapshots, principal)


def _get(session: Session, lease_id: str, principal: Principal, *,
         for_update: bool = False) -> LeaseRow:
    """The lease, if it exists and ``principal`` may see it; another principal's lease, and one
    whose tables were all dropped (it ended with them, docs/contract.md#the-built-in-catalog), are
    answered exactly as a lease that does not exist."""
    row = repo.get_lease(session, lease_id, for_update=for_update)
    if (row is None or not visible_to(row, principal)
            or repo.ended_with_its_tables(session, lease_id)):
        raise errors.UnknownLeaseError(f"unknown lease {lease_id!r}", lease_id=lease_id)
    return row


def renew_lease(session: Session, ctx: ServiceContext, lease_id: str,
                ttl_seconds: float | None, principal: Principal = ANONYMOUS_ADMIN) -> Lease:
    """A live lease runs ``ttl_seconds`` (default: its original term, at most the maximum
    term) from now.

    Raises:
        LeaseTermTooLongError: 422, ``ttl_seconds`` beyond the maximum term.
    """
    if ttl_seconds is not None:
        _bounded_term(ctx, ttl_seconds, "ttl_seconds")
    row = _get(session, lease_id, principal, for_update=True)
    now = ctx.clock.now_ms()
    snapshots = repo.lease_snapshots(session, [lease_id])[lease_id]
    if row.expires_at <= now:
        raise errors.LeaseExpiredError(f"lease {lease_id} expired at {row.expires_at}",
                                       lease_id=lease_id, expires_at=row.expires_at)
    handout.hold(session, (t for _, t, _ in snapshots))
    gone = handout.approved(session, ((t, s) for _, t, s in snapshots))
    if gone:
        raise errors.LeaseExpiredError(
            f"lease {lease_id} lapsed: some of its snapshots were approved for expiration",
            lease_id=lease_id, expires_at=row.expires_at,
            snapshots=[{"table": n, "snapshot_id": s} for n, t, s in snapshots if (t, s) in gone])
    term = (min(row.ttl_ms, _ttl_ms(ctx.settings.max_lease_seconds)) if ttl_seconds is None
            else _ttl_ms(ttl_seconds))
    row.expires_at = now + term
    session.flush()
    return _lease(row, snapshots)


def hold_more(session: Session, ctx: ServiceContext, row: LeaseRow,
              snapshots: Sequence[tuple[str, int, int]], *, until_ms: int | None = None) -> None:
    """Add ``(table name, table_id, snapshot_id)`` to a live lease the caller has locked, and
    run its term again from now (or to ``until_ms``, never earlier than that term). The caller
    holds the tables (``handout.hold``) since before it chose the snapshots; one approved for
    expiration is refused (410)."""
    handout.refuse_approved(session, snapshots)
    repo.add_snapshots(session, row.id, [(t, s) for _, t, s in snapshots])
    keep_alive(ctx, row, until_ms)


def keep_alive(ctx: ServiceContext, row: LeaseRow, until_ms: int | None = None) -> None:
    """Run a live lease's original term again from now, or to ``until_ms`` if later (the
    caller has locked it)."""
    row.expires_at = max(ctx.clock.now_ms() + row.ttl_ms, until_ms or 0)


def extend_live(session: Session, ctx: ServiceContext, row: LeaseRow,
                until_ms: int | None = None) -> bool:
    """:func:`keep_alive` for a lease read without a lock: False when it was released or
    expired meanwhile (nothing is written then)."""
    now = ctx.clock.now_ms()
    return repo.extend_if_live(session, row.id, now, max(now + row.ttl_ms, until_ms or 0))


def release_lease(session: Session, lease_id: str,
                  principal: Principal = ANONYMOUS_ADMIN) -> None:
    _get(session, lease_id, principal, for_update=True)
    repo.delete_lease(session, lease_id)
    logger.info("lease_released", extra={"lease_id": lease_id})


def get_lease(session: Session, lease_id: str, principal: Principal = ANONYMOUS_ADMIN) -> Lease:
    row = _get(session, lease_id, principal)
    return _lease(row, repo.lease_snapshots(session, [lease_id])[lease_id])


def list_leases(session: Session, ctx: ServiceContext, *, table: TableName | None,
                holder: str | None, limit: int,
                principal: Principal = ANONYMOUS_ADMIN) -> list[Lease]:
    """Live leases ``principal`` may see (an admin: all), soonest to expire first."""
    table_id = None
    if table is not None:
        row = tables_repo.find_table(session, table)
        if row is None:
            return []
        table_id = row.id
    if not sees_every_lease(principal) and principal.name is None:
        return []
    rows = repo.live_leases(session, ctx.clock.now_ms(), table_id=table_id, holder=holder,
                            limit=limit,
                            principal=None if sees_every_lease(principal) else principal.name)
    snapshots = repo.lease_snapshots(session, [r.id for r in rows])
    return [_lease(r, snapshots[r.id]) for r in rows]


def hidden_leases(session: Session, lease_ids: Sequence[str], principal: Principal) -> set[str]:
    """Those of ``lease_ids`` that ``principal`` may not see."""
    if sees_every_lease(principal) or not lease_ids:
        return set()
    owners = repo.principals_of(session, lease_ids)
    return {i for i in lease_ids if owners.get(i) is None or owners[i] != principal.name}
