"""HTTP only: two-phase snapshot expiration and the protected snapshots of a table."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from metaservice.auth.dependencies import CurrentPrincipal
from metaservice.deps import Context, ReadSession, WriteSession
from metaservice.names import TableName
from metaservice.path_params import CatalogPath, DatabasePath, TablePath
from metaservice.retention.expirations import service
from metaservice.retention.expirations.schemas import (
    CompletionIn,
    ExpirationIn,
    ExpirationOut,
    ExpirationStateOut,
    ProtectedOut,
    ProtectedSnapshotOut,
    RefusedOut,
)

router = APIRouter(tags=["expirations"])

ExpirationPath = Annotated[str, Path(min_length=1, max_length=36)]


def _state_out(state: service.ExpirationState) -> ExpirationStateOut:
    return ExpirationStateOut(expiration_id=state.expiration_id, table=state.table,
                              requested_at=state.requested_at, completed_at=state.completed_at,
                              approved=state.approved, expired=state.expired)


@router.post("/tables/{catalog}/{database}/{table}/expirations", response_model=ExpirationOut,
             status_code=201, operation_id="request_expiration")
def request_expiration(catalog: CatalogPath, database: DatabasePath, table: TablePath,
                       body: ExpirationIn, session: WriteSession, ctx: Context) -> ExpirationOut:
    """Phase one: approve the proposed snapshots that nothing protects. Approved snapshots are
    never handed out or leased again."""
    result = service.request_expiration(session, ctx, TableName(catalog, database, table),
                                        body.snapshot_ids, approve_unknown=body.approve_unknown)
    return ExpirationOut(
        expiration_id=result.expiration_id, table=result.table, approved=result.approved,
        refused=[RefusedOut(snapshot_id=r.snapshot_id, reason=r.reason, reasons=list(r.reasons))
                 for r in result.refused])


@router.post("/expirations/{expiration_id}/complete", response_model=ExpirationStateOut,
             operation_id="complete_expiration")
def complete_expiration(expiration_id: ExpirationPath, body: CompletionIn,
                        session: WriteSession, ctx: Context) -> ExpirationStateOut:
    """Phase two: the approved snapshots really deleted from Iceberg. Repeatable."""
    return _state_out(service.complete_expiration(session, ctx, expiration_id,
                                                  body.snapshot_ids))


@router.get("/expirations/{expiration_id}", response_model=ExpirationStateOut,
            operation_id="get_expiration")
def get_expiration(expiration_id: ExpirationPath, session: ReadSession) -> ExpirationStateOut:
    return _state_out(service.expiration_state(session, expiration_id))


@router.get("/tables/{catalog}/{database}/{table}/snapshots/protected",
            response_model=ProtectedOut, operation_id="list_protected_snapshots")
def list_protected_snapshots(catalog: CatalogPath, database: DatabasePath, table: TablePath,
                             session: ReadSession, ctx: Context,
                             principal: CurrentPrincipal) -> ProtectedOut:
    """Every snapshot that may not be expired now, and why. Leases of other principals are
    named ``lease``, without their ids."""
    name = TableName(catalog, database, table)
    return ProtectedOut(table=str(name), snapshots=[
        ProtectedSnapshotOut(snapshot_id=p.snapshot_id, barrier=p.barrier, reasons=p.reasons)
        for p in service.list_protected(session, ctx, name, principal)])
