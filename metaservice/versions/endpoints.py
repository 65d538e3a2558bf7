"""HTTP only: consistent versions of one or many tables."""

from __future__ import annotations

from fastapi import APIRouter

from metaservice.deps import Context, ReadSession
from metaservice.names import CatalogPath, DatabasePath, TableName, TablePath
from metaservice.versions import service
from metaservice.versions.cuts import Consistency
from metaservice.versions.schemas import TableVersion, VersionOut, VersionsIn, VersionsOut

router = APIRouter(tags=["versions"])


@router.get("/version/{consistency}/{catalog}/{database}/{table}", response_model=VersionOut,
            operation_id="get_version")
def get_version(consistency: Consistency, catalog: CatalogPath, database: DatabasePath,
                table: TablePath, session: ReadSession, ctx: Context) -> VersionOut:
    name = TableName(catalog, database, table)
    version = service.resolve(session, ctx, [name], consistency)[str(name)]
    return VersionOut(table=str(name), consistency=consistency.value, barrier=version.barrier,
                      snapshot_id=version.snapshot_id)


@router.post("/versions", response_model=VersionsOut, response_model_exclude_none=True,
             operation_id="get_versions")
def get_versions(body: VersionsIn, session: ReadSession, ctx: Context) -> VersionsOut:
    """Versions of many tables that reflect the same barrier per component."""
    names = [TableName.parse(t) for t in body.tables]
    versions = service.resolve(session, ctx, names, body.consistency, body.barrier)
    return VersionsOut(
        consistency="barrier" if body.barrier is not None else body.consistency.value,
        versions={n: TableVersion(barrier=v.barrier, snapshot_id=v.snapshot_id)
                  for n, v in versions.items()})
