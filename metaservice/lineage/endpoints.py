"""HTTP only: lineage."""

from __future__ import annotations

from typing import Annotated, Literal

import orjson
from fastapi import APIRouter, Query, Request, Response

from metaservice import openlineage
from metaservice.core.graph import Neighbourhood
from metaservice.deps import Context, ReadSession
from metaservice.lineage import service
from metaservice.lineage.schemas import LineageOut, SnapshotLineage, TableLineageOut
from metaservice.lineage.sender import naming_from
from metaservice.names import TableName
from metaservice.path_params import BarrierPath, CatalogPath, DatabasePath, TablePath
from metaservice.schemas import TextInt

router = APIRouter(tags=["lineage"])


@router.get("/lineage", response_model=LineageOut, operation_id="get_lineage")
def get_lineage(session: ReadSession, ctx: Context) -> Response:
    """The topology: every running job with the tables it reads and writes."""
    topology = ctx.topology_cache.get(session)
    tables, jobs, edges = service.describe(
        session, topology, {t: None for t in topology.tables}, set(topology.jobs),
        set(topology.edges))
    # Rendered directly in LineageOut's shape: validating thousands of nested objects built
    # from stored data again took over half of the request at 1,000 tables and jobs.
    return Response(orjson.dumps({"tables": tables, "jobs": jobs, "edges": edges}),
                    media_type="application/json")


@router.get("/lineage/{catalog}/{database}/{table}", response_model=TableLineageOut,
            operation_id="get_table_lineage")
def get_table_lineage(
    catalog: CatalogPath, database: DatabasePath, table: TablePath, session: ReadSession,
    ctx: Context,
    direction: Annotated[Literal["upstream", "downstream", "both"], Query()] = "both",
    depth: Annotated[TextInt | None, Query(ge=1, le=10_000)] = None,
) -> TableLineageOut:
    """Tables and jobs upstream and/or downstream of a table, with distances in hops."""
    qualified = TableName(catalog, database, table)
    service.require_known(session, qualified)
    name = str(qualified)
    topology = ctx.topology_cache.get(session)
    hood = Neighbourhood(tables={name: 0})
    for walk in (["upstream", "downstream"] if direction == "both" else [direction]):
        part = (topology.upstream if walk == "upstream" else topology.downstream)(name, depth)
        for t, d in part.tables.items():
            hood.tables[t] = min(d, hood.tables.get(t, d))
        hood.jobs |= part.jobs
        hood.edges |= part.edges
    tables, jobs, edges = service.describe(session, topology, hood.tables, hood.jobs, hood.edges)
    return TableLineageOut(table=name, direction=direction, depth=depth, tables=tables,
                           jobs=jobs, edges=edges)


@router.get("/lineage/{catalog}/{database}/{table}/barriers/{barrier}",
            response_model=SnapshotLineage, operation_id="get_snapshot_lineage")
def get_snapshot_lineage(catalog: CatalogPath, database: DatabasePath, table: TablePath,
                         barrier: BarrierPath,
                         session: ReadSession, ctx: Context) -> SnapshotLineage:
    """Exactly which source snapshots produced the table's snapshot at the barrier."""
    return service.snapshot_lineage(session, ctx, TableName(catalog, database, table), barrier)


@router.get(openlineage.BARRIER_FACET_PATH, operation_id="openlineage_barrier_facet_schema",
            response_class=Response,
            responses={200: {"content": {"application/schema+json": {}},
                             "description": "a JSON schema (draft 2020-12)"}})
def openlineage_barrier_facet_schema(request: Request) -> Response:
    """The JSON schema of ``metaservice_barrier``, the run facet of MetaService's OpenLineage
    events (its ``_schemaURL``)."""
    url = naming_from(request.app.state.settings).barrier_facet_schema_url
    return Response(orjson.dumps(openlineage.barrier_facet_schema(url)),
                    media_type="application/schema+json")
