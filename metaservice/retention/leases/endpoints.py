"""HTTP only: snapshot leases, and ``POST /versions``, which leases the versions it answers
when asked (its own router, ``versions_router``, mounted beside the versions' GET route)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Response
from fastapi.responses import JSONResponse

from metaservice.auth.dependencies import CurrentPrincipal
from metaservice.deps import Context, ReadSession, TransactionsDep, WriteSession
from metaservice.names import QualifiedTable, TableName
from metaservice.retention.leases import service
from metaservice.retention.leases.schemas import (
    LeasedSnapshotOut,
    LeaseIn,
    LeaseOut,
    LeasesOut,
    RenewIn,
)
from metaservice.schemas import TextInt
from metaservice.versions import service as versions_service
from metaservice.versions.schemas import VersionsIn, VersionsOut

router = APIRouter(tags=["leases"])

LeasePath = Annotated[str, Path(min_length=1, max_length=36)]


def lease_out(lease: service.Lease, now_ms: int) -> LeaseOut:
    return LeaseOut(lease_id=lease.lease_id, holder=lease.holder, created_at=lease.created_at,
                    expires_at=lease.expires_at, expired=lease.expires_at <= now_ms,
                    snapshots=[LeasedSnapshotOut(table=s.table, snapshot_id=s.snapshot_id)
                               for s in lease.snapshots])


@router.post("/leases", response_model=LeaseOut, status_code=201, operation_id="create_lease")
def create_lease(body: LeaseIn, session: WriteSession, ctx: Context,
                 principal: CurrentPrincipal) -> LeaseOut:
    """Protect snapshots from expiration until ``expires_at``. The lease belongs to the caller's
    token: only it or an admin sees, renews or releases it."""
    lease = service.create_lease(
        session, ctx, body.holder, body.ttl_seconds,
        [(TableName.parse(s.table), s.snapshot_id) for s in body.snapshots], principal)
    return lease_out(lease, ctx.clock.now_ms())


@router.post("/leases/{lease_id}/renew", response_model=LeaseOut, operation_id="renew_lease")
def renew_lease(lease_id: LeasePath, session: WriteSession, ctx: Context,
                principal: CurrentPrincipal,
                body: Annotated[RenewIn | None, Body()] = None) -> LeaseOut:
    """A live lease runs ``ttl_seconds`` (default: its original term) from now. Another
    principal's lease is 404, as one that does not exist."""
    lease = service.renew_lease(session, ctx, lease_id, (body or RenewIn()).ttl_seconds,
                                principal)
    return lease_out(lease, ctx.clock.now_ms())


@router.delete("/leases/{lease_id}", status_code=204, response_class=Response,
               operation_id="release_lease")
def release_lease(lease_id: LeasePath, session: WriteSession,
                  principal: CurrentPrincipal) -> Response:
    """Another principal's lease is 404, as one that does not exist."""
    service.release_lease(session, lease_id, principal)
    return Response(status_code=204)


@router.get("/leases/{lease_id}", response_model=LeaseOut, operation_id="get_lease")
def get_lease(lease_id: LeasePath, session: ReadSession, ctx: Context,
              principal: CurrentPrincipal) -> LeaseOut:
    """Another principal's lease is 404, as one that does not exist."""
    return lease_out(service.get_lease(session, lease_id, principal), ctx.clock.now_ms())


@router.get("/leases", response_model=LeasesOut, operation_id="list_leases")
def list_leases(session: ReadSession, ctx: Context, principal: CurrentPrincipal,
                table: Annotated[QualifiedTable | None, Query()] = None,
                holder: Annotated[str | None, Query(max_length=200)] = None,
                limit: Annotated[TextInt, Query(ge=1, le=1000)] = 100) -> LeasesOut:
    """The caller's live leases (an admin's: every one), soonest to expire first, optionally
    of one table or one holder."""
    name = TableName.parse(table) if table is not None else None
    now = ctx.clock.now_ms()
    return LeasesOut(leases=[lease_out(lease, now) for lease in service.list_leases(
        session, ctx, table=name, holder=holder, limit=limit, principal=principal)])


versions_router = APIRouter(tags=["versions"])


@versions_router.post("/versions", response_model=VersionsOut, operation_id="get_versions")
def get_versions(body: VersionsIn, transactions: TransactionsDep, ctx: Context,
                 principal: CurrentPrincipal) -> JSONResponse:
    """Versions of many tables that reflect the same barrier per component. With
    ``lease_seconds`` they are leased in the same (write) transaction; plain reads stay on a
    read transaction. Either way the transaction ends before the response is sent."""
    names = [TableName.parse(t) for t in body.tables]
    lease = None
    with transactions.transaction(write=body.lease_seconds is not None) as session:
        if body.lease_seconds is None:
            versions = versions_service.resolve(session, ctx, names, body.consistency, body.barrier)
        else:
            versions, lease = service.lease_versions(session, ctx, names, body.consistency,
                                                    body.barrier, body.lease_seconds, body.holder,
                                                    principal)
    # Rendered directly in VersionsOut's shape (``None`` fields left out): this is the hot read
    # path, and validating the answer built from stored data again cost a tenth of its CPU.
    answer: dict[str, Any] = {
        "consistency": "barrier" if body.barrier is not None else body.consistency.value,
        "versions": {n: _version(v) for n, v in versions.items()}}
    if lease is not None:
        answer |= {"lease_id": lease.lease_id, "expires_at": lease.expires_at}
    return JSONResponse(answer)


def _version(v: versions_service.Version) -> dict[str, Any]:
    answer: dict[str, Any] = {"barrier": v.barrier, "snapshot_id": v.snapshot_id,
                              "snapshot_barrier": v.snapshot_barrier}
    if v.held_back_by:
        answer["held_back_by"] = [h.details() for h in v.held_back_by]
    return answer
