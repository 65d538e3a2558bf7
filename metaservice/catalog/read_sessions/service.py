"""Read sessions of the catalog's consistent warehouses (docs/contract.md#consistent-warehouses):
the rules.

- ``GET /v1/config?warehouse=lake@strong`` (or ``lake@barrier=<B>``) opens a session: a lease
  with no snapshot yet, owned by the caller, whose term is ``read_session_seconds``. Its id,
  as the prefix ``session-<id>``, names the session in every later request of the client. A
  prefix ``view-<id>`` (sessions opened before the rename) names the same session.
- The first table loaded from a pipeline (a component of the topology) fixes the pipeline's
  barrier for the session: its strong cut at that moment, or B. Every later table of that
  pipeline is served at the same barrier, so a query, and every later query of the session,
  joins the pipeline's tables at one barrier. A table that is not exact there (the pipeline
  changed since) is refused with the errors of docs/contract.md#at-an-explicit-barrier; a new
  session sees the new pipeline.
- Each table is fixed at its first load and served at that snapshot ever after; the snapshot
  joins the session's lease. A load renews the session's term once a tenth of it has passed
  since the last renewal, and a renewal grants the term and that tenth
  (``renewal_due``, ``renewed_until``): the session lasts at least its term after its last
  use (docs/contract.md#read-sessions), at most a tenth more, and a session's loads write at most
  once per tenth of its term. An expired session is gone (404): its snapshots may have been expired
  meanwhile.
- A principal holds at most ``METASERVICE_MAX_READ_SESSIONS`` live sessions; one more is refused
  (429 ``too_many_read_sessions``). A prefix that names no live session of the caller is 404 on
  every route.
- A session's loads that fix a cut are serialised on its row, so two tables of one pipeline
  loaded at once (engines load in parallel) cannot get two cuts. A table's cut never changes
  once fixed, so a load of a fixed table takes no lock; one whose session is not due a renewal
  is one read statement (``fixed_cut``) and writes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from metaservice import errors
from metaservice.auth.service import Principal
from metaservice.catalog.errors import (
    TOO_MANY_READ_SESSIONS,
    NoSuchReadSessionError,
    NoSuchTableError,
    RefusedError,
)
from metaservice.catalog.read_sessions import repository as repo
from metaservice.catalog.read_sessions.consistent_warehouses import ConsistentWarehouse, CutKind
from metaservice.context import ServiceContext
from metaservice.core.cuts import Consistency
from metaservice.db.models import LeaseRow, ReadSessionRow
from metaservice.names import TableName
from metaservice.repositories import tables as tables_repo
from metaservice.retention import handout
from metaservice.retention.leases import service as leases_service
from metaservice.versions import service as versions

logger = logging.getLogger(__name__)

PREFIX = "session-"
LEGACY_PREFIXES = ("view-",)  # answered to sessions opened before they were named sessions
RENEWAL_FRACTION = 10  # a load renews a session once a tenth of its term passed since the last


def renewal_due(expires_at: int, ttl_ms: int, now_ms: int) -> bool:
    """Whether a load at ``now_ms`` renews the session: it would last less than its term
    after this use, i.e. a tenth of the term has passed since the last renewal."""
    return expires_at < now_ms + ttl_ms


def renewed_until(ttl_ms: int, now_ms: int) -> int:
    """A renewal's expiry: the term from now, and a tenth of it, so that the loads of the next
    tenth write nothing and the session still lasts its term after each of them."""
    return now_ms + ttl_ms + ttl_ms // RENEWAL_FRACTION


@dataclass(frozen=True)
class Cut:
    """Where a read session serves a table: the barrier and the snapshot at it."""

    kind: CutKind
    barrier: int
    snapshot_id: int


def open_session(session: Session, ctx: ServiceContext, catalog_name: str,
                 warehouse: ConsistentWarehouse, principal: Principal) -> str:
    """Open a read session of the consistent warehouse ``warehouse``; answers its prefix.

    Raises:
        RefusedError: 429 ``too_many_read_sessions``, the principal holds its cap already.
    """
    cap = ctx.settings.max_read_sessions
    repo.lock_read_sessions_of(session, principal.name)
    if repo.count_live_read_sessions(session, principal.name, ctx.clock.now_ms()) >= cap:
        raise RefusedError(
            TOO_MANY_READ_SESSIONS,
            f"token {principal.name!r} holds {cap} live read sessions already "
            "(METASERVICE_MAX_READ_SESSIONS); release one with DELETE /leases/<id> (a session's "
            "prefix is session-<id>), or wait until one expires "
            f"({ctx.settings.read_session_seconds:g} s after its last use)",
            {"limit": cap}, status_code=429)
    lease = leases_service.open_read_session_lease(session, ctx, f"{catalog_name}@{warehouse}",
                                                   principal)
    repo.insert_read_session(session, lease.lease_id, warehouse.kind.value, warehouse.barrier,
                             ctx.clock.now_ms())
    logger.info("catalog_read_session_opened",
                extra={"session_id": lease.lease_id, "warehouse": f"{catalog_name}@{warehouse}"})
    return PREFIX + lease.lease_id


def cut_for(session: Session, ctx: ServiceContext, prefix: str, name: TableName,
            principal: Principal) -> Cut:
    """The cut at which the session named by ``prefix`` serves ``name``, fixed now if this is
    its first load; runs the session's term again.

    Raises:
        NoSuchReadSessionError: the session expired, never was, or is another token's.
        NoSuchTableError: MetaService records no barrier of the table.
        MetaServiceError: the errors of docs/contract.md#at-an-explicit-barrier for a table with no
        version at the cut.
    """
    read_session, lease = _live_session(session, ctx, prefix, principal, lock=False)
    kind = CutKind(read_session.kind)
    fixed = repo.read_session_cuts(session, read_session.id).get(str(name))
    if fixed is None:
        read_session, lease = _live_session(session, ctx, prefix, principal, lock=True)
        cuts = repo.read_session_cuts(session, read_session.id)  # as of the lock
        fixed = cuts.get(str(name))
    now = ctx.clock.now_ms()
    if (renewal_due(lease.expires_at, lease.ttl_ms, now)
            and not leases_service.extend_live(session, ctx, lease,
                                               renewed_until(lease.ttl_ms, now))):
        raise _gone(prefix)  # released or expired since it was read
    if fixed is not None:
        return Cut(kind, fixed[1], fixed[2])
    row = tables_repo.find_table(session, name)
    if row is None:
        raise NoSuchTableError(f"{name} has no barrier recorded by MetaService: a consistent "
                               "warehouse serves only tables with a consistent version")
    handout.hold(session, [row.id])
    barrier = read_session.barrier
    if barrier is None:
        pipeline = ctx.topology_cache.get(session).component(str(name))
        barrier = next((b for table, (_, b, _) in cuts.items() if table in pipeline), None)
    if barrier is None:
        version = versions.resolve(session, ctx, [name], Consistency.strong)[str(name)]
    else:
        version = _at_fixed_cut(session, ctx, name, barrier,
                                strong=read_session.barrier is None)
    leases_service.hold_more(session, ctx, lease, [(str(name), row.id, version.snapshot_id)],
                             until_ms=renewed_until(lease.ttl_ms, ctx.clock.now_ms()))
    repo.add_read_session_cut(session, read_session.id, row.id, version.barrier,
                              version.snapshot_id)
    logger.info("catalog_read_session_cut", extra={
        "session_id": read_session.id, "table": str(name), "barrier": version.barrier,
        "snapshot_id": version.snapshot_id})
    return Cut(kind, version.barrier, version.snapshot_id)


def _at_fixed_cut(session: Session, ctx: ServiceContext, name: TableName, barrier: int, *,
                  strong: bool) -> versions.Version:
    """``name`` at the barrier its session fixed for its pipeline.

    In a strong session a table the cut left out — one with no version yet, or one that joined
    the pipeline and has not caught up (docs/contract.md#catching-up) — is refused as a strong
    request for it would be (404 ``no_version``, ``catching_up``, naming what holds it), whichever
    load of the session fixed the cut; only a table the strong cut holds now but the session's older
    cut does not (the pipeline changed since) gets the explicit barrier's refusal.
    """
    try:
        return versions.resolve(session, ctx, [name], None, barrier)[str(name)]
    except (errors.BarrierNotCompleteError, errors.BarrierNotExactError):
        # short of the cut, or past it without being exact there (it rejoined from a later
        # barrier): a table catching up either way
        if strong:
            versions.resolve(session, ctx, [name], Consistency.strong)  # its refusal, if any
        raise


def fixed_cut(session: Session | Connection, ctx: ServiceContext, prefix: str, name: TableName,
              principal: Principal) -> tuple[Cut, str] | None:
    """A repeat load's cut, read without a lock by one statement that writes nothing: the cut
    the session named by ``prefix`` fixed for ``name``, and the table's current metadata file.
    None whenever :func:`cut_for` has more to do or to say: no such session, expired, another
    token's, due a renewal; the table not cut in the session yet, or without a pointer.

    A cut never changes once fixed and its snapshot stays leased while the session lives, so
    what this reads in one statement is what ``cut_for`` would answer.
    """
    session_id = _session_id(prefix) if "\x00" not in prefix else None
    if not session_id:
        return None
    found = repo.fixed_cut(session, session_id, name)
    if (found is None or found.snapshot_id is None or found.barrier is None
            or found.head_location is None
            or renewal_due(found.expires_at, found.ttl_ms, ctx.clock.now_ms())
            or not leases_service.may_see(found.principal, principal)):
        return None
    return Cut(CutKind(found.kind), found.barrier, found.snapshot_id), found.head_location


def ensure_live(session: Session, ctx: ServiceContext, prefix: str,
                principal: Principal) -> None:
    """Every route under a prefix answers 404 unless it names a live session of the caller."""
    _live_session(session, ctx, prefix, principal, lock=False)


def _live_session(session: Session, ctx: ServiceContext, prefix: str, principal: Principal, *,
                  lock: bool) -> tuple[ReadSessionRow, LeaseRow]:
    # A NUL byte names no session (and PostgreSQL cannot even compare it).
    session_id = _session_id(prefix) if "\x00" not in prefix else None
    found = repo.get_read_session(session, session_id, lock=lock) if session_id else None
    if (found is None or found[1].expires_at <= ctx.clock.now_ms()
            or not leases_service.visible_to(found[1], principal)):
        raise _gone(prefix)
    return found


def _session_id(prefix: str) -> str | None:
    for known in (PREFIX, *LEGACY_PREFIXES):
        if prefix.startswith(known):
            return prefix.removeprefix(known)
    return None


def _gone(prefix: str) -> NoSuchReadSessionError:
    return NoSuchReadSessionError(
        f"read session {prefix!r} expired or does not exist: connect again (a new session "
        "reads newer data)")
