"""HTTP only: the consistent version of one table. ``POST /versions`` (many tables, leased when
asked) is served from ``retention/leases/endpoints.py``: leasing sits above the versions."""

from __future__ import annotations

from fastapi import APIRouter

from metaservice.core.cuts import Consistency
from metaservice.deps import Context, ReadSession
from metaservice.names import TableName
from metaservice.path_params import CatalogPath, DatabasePath, TablePath
from metaservice.versions import service
from metaservice.versions.schemas import TableHoldOut, VersionOut

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
