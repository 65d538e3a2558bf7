"""The answers of scan planning's mutating routes (HTTP only; the rules are ``service.py``), given
alike at the head and under a read session's prefix: a plan and its cancel, each under its
``Idempotency-Key`` as a table's mutations are (``tables/idempotent.py``)."""

from __future__ import annotations

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from metaservice.catalog import idempotency
from metaservice.catalog.deps import levels, principal, site
from metaservice.catalog.requests import PlanTableScanRequest
from metaservice.catalog.scan_plans import service as scan_plans
from metaservice.catalog.tables.idempotent import idempotent
from metaservice.context import ServiceContext
from metaservice.db.session import Database


def plan_table_scan(request: Request, database: Database, ctx: ServiceContext,
                    namespace: str, table: str, body: PlanTableScanRequest,
                    prefix: str | None = None) -> Response:
    """``POST …/plan``: a retry with the plan's key answers the same plan (its plan-id), holding
    no second lease and counting nothing against the caller's cap."""
    def run(guard: idempotency.Guard | None) -> Response:
        return JSONResponse(scan_plans.plan_table_scan(
            database, ctx, site(request), levels(namespace), table, body, principal(request),
            prefix, guard))

    return idempotent(request, database, ctx, "planTableScan", 200, run, body)


def cancel_planning(request: Request, database: Database, ctx: ServiceContext,
                    namespace: str, table: str, plan_id: str,
                    prefix: str | None = None) -> Response:
    """``DELETE …/plan/{plan-id}``: a retry with the cancel's key is answered 204 again, not
    404."""
    def run(guard: idempotency.Guard | None) -> Response:
        with database.transaction(write=True) as session:
            scan_plans.cancel_planning(session, ctx, levels(namespace), table, plan_id,
                                       principal(request), prefix, guard)
        return Response(status_code=204)

    return idempotent(request, database, ctx, "cancelPlanning", 204, run)

