"""HTTP only: consistent versions of one or many tables."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from metaservice.core.cuts import Consistency
from metaservice.deps import Context, CurrentPrincipal, ReadSession, TransactionsDep
from metaservice.names import TableName
from metaservice.path_params import CatalogPath, DatabasePath, TablePath
from metaservice.retention.leases import service as leases
from metaservice.versions import service
from metaservice.versions.schemas import TableHoldOut, VersionOut, VersionsIn, VersionsOut

router = APIRouter(tags=["versions"])


# ``held_back_by`` is left out unless something holds the cut (``exclude_unset``): old clients
# see the answer they always saw.
@router.get("/version/{consistency}/{catalog}/{database}/{table}", response_model=VersionOut,
            response_model_exclude_unset=True, operation_id="get_version")
def get_version(consistency: Consistency, catalog: CatalogPath, database: DatabasePath,
                table: TablePath, session: ReadSession, ctx: Context) -> VersionOut:
    name = TableName(catalog, database, table)
    version = service.resolve(session, ctx, [name], consistency)[str(name)]
    answer = VersionOut(table=str(name), consistency=consistency.value, barrier=version.barrier,
                        snapshot_id=version.snapshot_id,
                        snapshot_barrier=version.snapshot_barrier)
    if version.held_back_by:
        answer.held_back_by = [TableHoldOut.model_validate(h.details())
                               for h in version.held_back_by]
    return answer


@router.post("/versions", response_model=VersionsOut, operation_id="get_versions")
def get_versions(body: VersionsIn, transactions: TransactionsDep, ctx: Context,
                 principal: CurrentPrincipal) -> JSONResponse:
    """Versions of many tables that reflect the same barrier per component. With
    ``lease_seconds`` they are leased in the same (write) transaction; plain reads stay on a
    read transaction. Either way the transaction ends before the response is sent."""
    names = [TableName.parse(t) for t in body.tables]
    lease = None
    with transactions.transaction(write=body.lease_seconds is not None) as session:
        if body.lease_seconds is None:
            versions = service.resolve(session, ctx, names, body.consistency, body.barrier)
        else:
            versions, lease = leases.lease_versions(session, ctx, names, body.consistency,
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


def _version(v: service.Version) -> dict[str, Any]:
    answer: dict[str, Any] = {"barrier": v.barrier, "snapshot_id": v.snapshot_id,
                              "snapshot_barrier": v.snapshot_barrier}
    if v.held_back_by:
        answer["held_back_by"] = [h.details() for h in v.held_back_by]
    return answer
